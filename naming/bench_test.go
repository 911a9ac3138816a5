package naming

import (
	"crypto/sha256"
	"testing"
	"unsafe"
)

var benchIDs = []string{
	"dispatch:run1:extract:1",
	"dispatch:nightly-2026-11-22:report.build:k-kdfo6u43zxiplof3rajyylplvs",
	"timer:retry:run-0193ab:transform.partition-0042:17:1705340400",
}

var sinkString string
var sinkSum [32]byte

// eachBenchID runs body as one sub-benchmark per ID of benchIDs, named by
// kind and length so the benchmarks below line up in benchstat.
func eachBenchID(b *testing.B, body func(b *testing.B, id ID)) {
	for _, s := range benchIDs {
		id, err := Parse(s)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(id.Kind().String()+"/"+itoa(len(s)), func(b *testing.B) {
			b.ReportAllocs()
			body(b, id)
		})
	}
}

// BenchmarkCloudTaskID measures hashing and encoding an ID's text into its
// Cloud Tasks ID, the work done once whenever an ID is made (NewDispatch,
// NewRetryTimer, NewHeartbeat or Parse). Compare it with
// BenchmarkSHA256Baseline (benchstat, or the ratio of the two ns/op in the
// same run).
func BenchmarkCloudTaskID(b *testing.B) {
	eachBenchID(b, func(b *testing.B, id ID) {
		text := id.String()
		prefix := id.Kind().prefix()
		for b.Loop() {
			sinkString = hashText(prefix, text)
		}
		if sinkString != id.CloudTaskID() {
			b.Fatalf("hashText(%q) = %q, the ID holds %q", text, sinkString, id.CloudTaskID())
		}
	})
}

// BenchmarkCachedCloudTaskID measures ID.CloudTaskID on an ID already
// made, the call a dispatch makes each time it needs the task ID: a read
// of the value hashed when the ID was made.
func BenchmarkCachedCloudTaskID(b *testing.B) {
	eachBenchID(b, func(b *testing.B, id ID) {
		for b.Loop() {
			sinkString = id.CloudTaskID()
		}
	})
}

// BenchmarkSHA256Baseline is the floor for BenchmarkCloudTaskID: a bare
// SHA-256 of the same bytes, with no encoding and no result string.
func BenchmarkSHA256Baseline(b *testing.B) {
	eachBenchID(b, func(b *testing.B, id ID) {
		in := []byte(id.String())
		for b.Loop() {
			sinkSum = sha256.Sum256(in)
		}
	})
}

// BenchmarkSHA256AllocBaseline is the floor for BenchmarkCloudTaskID once
// its one allowed allocation is counted: the same bare SHA-256 plus a
// 28-byte result string, with no encoding. The gap between this and
// BenchmarkSHA256Baseline is what an allocation costs on the machine.
func BenchmarkSHA256AllocBaseline(b *testing.B) {
	eachBenchID(b, func(b *testing.B, id ID) {
		in := []byte(id.String())
		for b.Loop() {
			sinkSum = sha256.Sum256(in)
			buf := make([]byte, CloudTaskIDLength)
			buf[0] = sinkSum[0]
			sinkString = unsafe.String(unsafe.SliceData(buf), len(buf))
		}
	})
}

// BenchmarkParse measures reading an internal ID back into its parts.
func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range benchIDs {
			if _, err := Parse(s); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
