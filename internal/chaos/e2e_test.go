package chaos

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestE2EShort runs the e2e scenario at its default size on both stores:
// 150 logical attempts each, every planned fault kind landing at least
// once per store, then the checker.
//
// Time budget: about 90 s on 2 cores (a PostgreSQL cluster, then per store
// about 20 child processes and the emulator's drain); at most 3 minutes.
func TestE2EShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the e2e scenario starts PostgreSQL and many processes")
	}
	var out bytes.Buffer
	reports := map[string]e2eReport{}
	var mu sync.Mutex
	rep, err := Run(context.Background(), Options{
		Seed: 20261127, Binary: binary, Out: &out, Dir: t.TempDir(), Only: []string{ScenarioE2E},
		e2eReport: func(store string, r e2eReport) {
			mu.Lock()
			defer mu.Unlock()
			reports[store] = r
		},
	})
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	res := rep.Results[0]
	require.True(t, res.Passed, res.Line())
	require.Len(t, reports, 2)
	for store, r := range reports {
		require.Equal(t, DefaultE2EItems, r.Attempts, store)
		require.Zero(t, r.Lost, store)
		require.Zero(t, r.Duplicate, store)
		require.Empty(t, r.Problems, store)
		require.Positive(t, r.Effects, store)
	}
	require.True(t, strings.HasPrefix(res.Line(), "PASS e2e: "), res.Line())
}

// Faults planted in the running system make the checker fail: a worker
// that applies one effect outside its inbox (a duplicate effect), a
// delivery the emulator answers OK without making (a lost effect), and a
// held timer's create answered OK whose task is gone. Each runs the
// Parquet leg with 60 logical attempts: about 30 s on 2 cores.
func TestE2ECatchesPlantedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the e2e scenario starts PostgreSQL and many processes")
	}
	tests := []struct {
		mutation e2eMutation
		want     string
	}{
		{mutationBypassInbox, "duplicate effect: 1 (e.g. "},
		{mutationDropDelivery, "lost effect (acknowledged, no effect): 1 (e.g. "},
		{mutationDropCreate, "held timer's task missing: 1 (e.g. timer:heartbeat:"},
	}
	for _, tt := range tests {
		t.Run(string(tt.mutation), func(t *testing.T) {
			var out bytes.Buffer
			rep, err := Run(context.Background(), Options{
				Seed: 7, Binary: binary, Out: &out, Dir: t.TempDir(), Only: []string{ScenarioE2E},
				Requests: 60, e2eMutation: tt.mutation, e2eStores: []string{storeParquet},
			})
			require.NoError(t, err)
			require.Equal(t, 1, rep.Failed, out.String())
			require.Contains(t, rep.Results[0].Held, tt.want)
		})
	}
}
