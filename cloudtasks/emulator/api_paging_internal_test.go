package emulator

import (
	"testing"
	"time"
)

// BenchmarkPageToken measures issuing a page token and opening it on the
// next call: the cost the MAC adds to a List page. Time budget: about a
// second with the default -benchtime.
func BenchmarkPageToken(b *testing.B) {
	p := newPageTokens()
	scope := pageScope("ListTasks", "projects/p/locations/l/queues/q")
	last := "projects/p/locations/l/queues/q/tasks/d_0123456789abcdefghijklmnopqrstuv"
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		tok := p.issue(scope, last, now)
		if _, err := p.open(scope, tok, now); err != nil {
			b.Fatal(err)
		}
	}
}
