package parquetbox

import (
	"github.com/ctdispatch/ctdispatch/outbox"
)

// trustedStream passes on the trusted records of src and hands every other
// one to foreign, so merges never fold a foreign row into a real state.
type trustedStream struct {
	src     recordStream
	foreign func(*outbox.Record)
}

func (s trustedStream) next() (outbox.Record, error) {
	for {
		r, err := s.src.next()
		if err != nil || r.Trusted() {
			return r, err
		}
		// A copy, so that only a foreign record escapes to the heap, not
		// every record read.
		f := r
		s.foreign(&f)
	}
}
