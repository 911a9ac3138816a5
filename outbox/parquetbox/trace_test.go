package parquetbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// A record with trace and span IDs goes through the log under format 7
// (a dispatch or timer) or 8 (a delivery); one without keeps format 3 or
// 4 (with its Version), byte for byte what a log written before the IDs
// holds.
func TestTracedRecordCodecRoundTrip(t *testing.T) {
	t.Parallel()
	id, err := naming.NewDispatch("run-9", "task.x", naming.Attempt(3))
	require.NoError(t, err)
	_, dl := deliveryRecs(id, "019ab6e2", 1, outbox.StatusDone, 200, t0)
	d := dispatchRec("run-9", "task.x", "3", outbox.StatusCreated)
	for _, tc := range []struct {
		r             outbox.Record
		plain, traced byte
	}{{d, 3, 7}, {dl, 4, 8}} {
		r := tc.r
		require.NoError(t, r.Prepare(procA, t0))
		plain := appendRecord(nil, &r)
		require.Equal(t, tc.plain, plain[0])
		r.TraceID, r.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		enc := appendRecord(nil, &r)
		require.Equal(t, tc.traced, enc[0])
		require.Equal(t, plain[1:], enc[1:len(plain)], "the IDs follow the fields as they were")
		got, err := decodeRecord(enc)
		require.NoError(t, err)
		require.Equal(t, r, got)
		_, err = decodeRecord(enc[:len(enc)-1])
		require.ErrorIs(t, err, errBadRecord)
	}
	for _, b := range []byte{0, 5, 6, 9} {
		_, err = decodeRecord([]byte{b})
		require.ErrorIs(t, err, errBadRecord)
	}
}
