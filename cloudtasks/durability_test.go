package cloudtasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// heldOutbox is an in-memory outbox that keeps every record at once but
// reports an outcome record (not a pending one) kept only when the test
// calls the done function it hands over, like a group commit still
// syncing. It has only the Outbox methods, as a Parquet outbox, so the
// pending record goes through Append too.
type heldOutbox struct {
	outbox.Outbox
	held chan func(error)
}

func (h *heldOutbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	if r.Status == outbox.StatusPending || done == nil {
		return h.Outbox.Append(ctx, r, done)
	}
	if err := h.Outbox.Append(ctx, r, nil); err != nil {
		return err
	}
	h.held <- done
	return nil
}

// Durability, by default and set, decides whether a call is answered before
// its outcome record is kept (overlapped) or only after (strict).
func TestDurabilityDecidesWhenTheAnswerComes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		mode         cloudtasks.Durability
		answersFirst bool
	}{
		{"default", "", true},
		{"overlapped", cloudtasks.DurabilityOverlapped, true},
		{"strict", cloudtasks.DurabilityStrict, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			box := &heldOutbox{Outbox: outbox.NewMemory(w.clock), held: make(chan func(error), 1)}
			cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default", EmulatorAddr: w.emu.Addr(),
				Clock: w.clock, Durability: tt.mode}
			d, err := cloudtasks.NewDispatcher(context.Background(), box, &cfg)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })

			call := dispatchAsync(context.Background(), d, request("run1", "t", 1, "x"))
			var kept func(error)
			select {
			case kept = <-box.held:
			case <-time.After(30 * time.Second):
				t.Fatal("the outcome record was never appended")
			}
			if !tt.answersFirst {
				select {
				case a := <-call:
					t.Fatalf("answered before the outcome was kept: %+v", a)
				default:
				}
			} else {
				a := receive(t, call, "the call, while its outcome is not kept")
				require.NoError(t, a.err)
				require.Equal(t, cloudtasks.OutcomeCreated, a.res.Outcome)
			}
			kept(nil)
			if !tt.answersFirst {
				a := receive(t, call, "the call, once its outcome is kept")
				require.NoError(t, a.err)
				require.Equal(t, cloudtasks.OutcomeCreated, a.res.Outcome)
			}
			require.Equal(t, 1, w.emu.TaskCount())
		})
	}
}
