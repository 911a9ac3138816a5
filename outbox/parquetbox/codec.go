package parquetbox

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

// recordVersion is the first byte of every encoded record, so a later format
// can be told apart. deliveryVersion marks a record of the deliveries
// table: version 1's fields, then the four delivery columns. Formats 3 and
// 4 (versionedRecord, versionedDelivery) are 1 and 2 followed by the
// record's Version; they are what is written now, and logs written in 1
// or 2 read as they did, with Version 0.
const (
	recordVersion     = 1
	deliveryVersion   = 2
	versionedRecord   = 3
	versionedDelivery = 4
)

// traced is added to the format byte of a record that carries trace and
// span IDs, which then follow its Version as two strings; records without
// them are encoded as before the IDs existed. So 7 and 8 are formats 3
// and 4 with trace IDs.
const traced = 4

var errBadRecord = errors.New("malformed record")

// appendRecord encodes r after dst: a version byte, then each field as a
// uvarint length and bytes (strings) or a varint (numbers, times in
// microseconds since the epoch, 0 for the zero time).
func appendRecord(dst []byte, r *outbox.Record) []byte {
	version := byte(versionedRecord)
	if r.Table == outbox.TableDeliveries {
		version = versionedDelivery
	}
	if r.TraceID != "" || r.SpanID != "" {
		dst = append(dst, version+traced)
	} else {
		dst = append(dst, version)
	}
	for _, s := range [...]string{string(r.Table), r.ID, r.CloudTaskID, r.Queue, r.RunID, r.TaskKey,
		r.Attempt, r.Kind, string(r.Status), r.ErrorCode, r.PayloadSHA256, r.ProcessorUUID} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	dst = binary.AppendVarint(dst, int64(r.CreateCalls))
	for _, t := range [...]time.Time{r.CreatedAt, r.UpdatedAt, r.DueAt} {
		dst = binary.AppendVarint(dst, tableschema.Micros(t))
	}
	if version == versionedDelivery {
		d := &r.Delivery
		for _, v := range [...]int64{int64(d.RetryCount), int64(d.ExecutionCount), int64(d.HTTPStatus), d.Latency.Microseconds()} {
			dst = binary.AppendVarint(dst, v)
		}
	}
	dst = binary.AppendVarint(dst, r.Version)
	if r.TraceID != "" || r.SpanID != "" {
		for _, s := range [...]string{r.TraceID, r.SpanID} {
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		}
	}
	return dst
}

// decodeRecord is the inverse of appendRecord.
func decodeRecord(b []byte) (outbox.Record, error) {
	var r outbox.Record
	if len(b) == 0 || b[0] < recordVersion || b[0] > versionedDelivery+traced || (b[0] > versionedDelivery && b[0] < versionedRecord+traced) {
		return r, errBadRecord
	}
	version, hasTrace := b[0], b[0] > versionedDelivery
	if hasTrace {
		version -= traced
	}
	delivery, versioned := version == deliveryVersion || version == versionedDelivery, version >= versionedRecord
	b = b[1:]
	var strs [14]string
	for i := range strs[:12] {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return r, errBadRecord
		}
		strs[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	var nums [9]int64
	n := 4
	if delivery {
		n = 8
	}
	if versioned {
		n++ // the Version, after the delivery columns of a delivery
	}
	for i := range nums[:n] {
		v, k := binary.Varint(b)
		if k <= 0 {
			return r, errBadRecord
		}
		nums[i] = v
		b = b[k:]
	}
	for i := 12; hasTrace && i < 14; i++ {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return r, errBadRecord
		}
		strs[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	if len(b) != 0 {
		return r, errBadRecord
	}
	var recVersion int64
	if versioned {
		recVersion = nums[n-1]
		nums[n-1] = 0
	}
	r = outbox.Record{
		Table: outbox.Table(strs[0]), ID: strs[1], CloudTaskID: strs[2], Queue: strs[3], RunID: strs[4],
		TaskKey: strs[5], Attempt: strs[6], Kind: strs[7], Status: outbox.Status(strs[8]), ErrorCode: strs[9],
		PayloadSHA256: strs[10], ProcessorUUID: strs[11], TraceID: strs[12], SpanID: strs[13], CreateCalls: int32(nums[0]),
		CreatedAt: tableschema.FromMicros(nums[1]), UpdatedAt: tableschema.FromMicros(nums[2]), DueAt: tableschema.FromMicros(nums[3]),
		Delivery: outbox.DeliveryFields{RetryCount: int32(nums[4]), ExecutionCount: int32(nums[5]),
			HTTPStatus: int32(nums[6]), Latency: time.Duration(nums[7]) * time.Microsecond},
		Version: recVersion,
	}
	r.Normalize()
	return r, nil
}
