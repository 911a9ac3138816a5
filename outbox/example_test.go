package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// An in-memory outbox follows the file outbox's rules: here, a foreign
// record is refused and a stale pending one is found.
func ExampleNewMemory() {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m := outbox.NewMemory(clock)
	id, _ := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	err := outbox.AppendAndWait(ctx, m, outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: "d_made_up", Status: outbox.StatusCreated})
	fmt.Println(errors.Is(err, outbox.ErrForeignRecord))
	_ = outbox.AppendAndWait(ctx, m, outbox.Record{Table: outbox.TableDispatch, ID: id.String(), Status: outbox.StatusPending})
	clock.Advance(time.Minute)
	stale, _ := m.Pending(ctx, outbox.TableDispatch, 30*time.Second)
	fmt.Println(stale[0].ID, stale[0].CloudTaskID, stale[0].UpdatedAt)
	// Output:
	// true
	// dispatch:run1:extract:1 d_cxtoltqhbncw6nevn7hy53kqn6 2026-03-01 12:00:00 +0000 UTC
}
