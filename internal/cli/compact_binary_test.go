package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Two `ctdispatch compact` processes started together on one outbox share
// the day: each bucket of it is merged by exactly one of them (the other
// finds it busy, or already within the tiers' bounds), and every ID reads
// back once, in its latest state. Time budget: about 3s (the binary is
// built once per test process).
func TestBinaryTwoCompactionsShareADay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	const rounds, perRound = 4, 500
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse("00000000-0000-4000-8000-0000000000cc")})
	require.NoError(t, err)
	for round := range rounds {
		for i := range perRound {
			id, err := naming.NewDispatch("share", fmt.Sprintf("t%d", round*perRound+i), naming.Attempt(1))
			require.NoError(t, err)
			r := outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
				Queue: cliQueue, RunID: "share", TaskKey: fmt.Sprintf("t%d", round*perRound+i), Attempt: "1", Status: outbox.StatusPending,
				CreatedAt: cliT0, UpdatedAt: cliT0}
			require.NoError(t, box.Append(ctx, r, nil))
			r.Status, r.CreateCalls, r.UpdatedAt = outbox.StatusCreated, 1, cliT0.Add(1)
			require.NoError(t, box.Append(ctx, r, nil))
		}
		require.NoError(t, box.Flush(ctx))
	}
	require.NoError(t, box.Close())

	bin := ctdispatchBinary(t)
	cmds := make([]*exec.Cmd, 2)
	outs := make([]*bytes.Buffer, 2)
	for i := range cmds {
		cmds[i] = exec.Command(bin, "compact", "--outbox", dir)
		cmds[i].Env = append(os.Environ(), emulatorEnv+"=")
		outs[i] = &bytes.Buffer{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
	}
	for _, c := range cmds {
		require.NoError(t, c.Start())
	}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), outs[i].String())
	}
	merged := regexp.MustCompile(`(?m)^dispatch_outbox/created_date=2026-03-01 (b\dof8): compacted: 4 files, 1?\d{3} rows, \d+ bytes -> 1 files, \d+ rows, \d+ bytes; 0 dropped by retention; runs 4 -> 1 \(full\)$`)
	by := map[string]int{}
	for _, out := range outs {
		for _, m := range merged.FindAllStringSubmatch(out.String(), -1) {
			by[m[1]]++
		}
	}
	want := map[string]int{}
	for k := range 8 {
		want[fmt.Sprintf("b%dof8", k)] = 1
	}
	require.Equal(t, want, by, "%s\n---\n%s", outs[0], outs[1])

	r, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ReadOnly: true})
	require.NoError(t, err)
	defer r.Close()
	got, err := r.Lookup(ctx, outbox.Query{RunID: "share"})
	require.NoError(t, err)
	require.Len(t, got, rounds*perRound)
	for _, rec := range got {
		require.Equal(t, outbox.StatusCreated, rec.Status, rec.ID)
	}
}
