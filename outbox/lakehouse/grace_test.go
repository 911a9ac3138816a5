package lakehouse_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Time budget: a few seconds; time moves only by the injected clock.
// Publish keeps the grace Enable recorded unless its caller sets one: a
// snapshot superseded `age` ago expires exactly when age exceeds that
// grace.
func TestPublishUsesTheRecordedGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		enable, caller time.Duration
		age            time.Duration
		expired        int
	}{
		{"recorded 2h, within it", 2 * time.Hour, 0, 90 * time.Minute, 0},
		{"recorded 2h, past it", 2 * time.Hour, 0, 121 * time.Minute, 1},
		{"recorded default, within it", 0, 0, 59 * time.Minute, 0},
		{"recorded default, past it", 0, 0, 61 * time.Minute, 1},
		{"caller's 30m over the recorded 2h", 2 * time.Hour, 30 * time.Minute, 31 * time.Minute, 1},
		{"caller's 3h over the recorded 1h", time.Hour, 3 * time.Hour, 2 * time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := clockwork.NewFakeClockAt(t0)
			ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: t.TempDir(), ProcessorUUID: uuid.New(), Clock: clock})
			require.NoError(t, err)
			defer ob.Close()
			require.NoError(t, lakehouse.Enable(ctx, ob, lakehouse.Config{Grace: tc.enable, Clock: clock}))
			recorded, on, err := lakehouse.Enabled(ctx, ob)
			require.NoError(t, err)
			require.True(t, on)
			want := tc.enable
			if want == 0 {
				want = lakehouse.DefaultGrace
			}
			require.Equal(t, want, recorded.Grace)

			cfg := lakehouse.Config{Grace: tc.caller, Clock: clock}
			writeDispatches(t, ob, clock, "r1", 1, false)
			_, err = lakehouse.Publish(ctx, ob, cfg)
			require.NoError(t, err)
			writeDispatches(t, ob, clock, "r2", 1, false)
			rep, err := lakehouse.Publish(ctx, ob, cfg) // the first snapshot superseded now
			require.NoError(t, err)
			require.Equal(t, lakehouse.Appended, rep.Tables[0].Action)
			clock.Advance(tc.age)
			rep, err = lakehouse.Publish(ctx, ob, cfg)
			require.NoError(t, err)
			require.Equal(t, tc.expired, rep.Tables[0].Expired)
		})
	}
}
