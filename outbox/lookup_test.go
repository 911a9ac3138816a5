package outbox

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingFile counts the bytes read through it.
type countingFile struct {
	*os.File
	n atomic.Int64
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.File.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

func TestLookupReadsASmallFractionOfTheFile(t *testing.T) {
	t.Parallel()
	const rows = 300_000
	recs := make([]Record, 0, rows)
	for i := range rows {
		r := dispatchRec(fmt.Sprintf("run%d", i/1000), fmt.Sprintf("task%d", i%1000), "1", StatusCreated)
		r.CloudTaskID = fmt.Sprintf("d_%026x", uint64(i)*0x9E3779B97F4A7C15)
		r.PayloadSHA256 = fmt.Sprintf("%064x", uint64(i)*0x9E3779B97F4A7C15)
		r.CreatedAt, r.UpdatedAt = t0, t0
		recs = append(recs, r)
	}
	sortRecords(recs)
	path := filepath.Join(t.TempDir(), "big.parquet")
	require.NoError(t, writeParquet(path, TableDispatch, recs))

	for _, tc := range []struct {
		name  string
		fld   field
		value string
		hits  int
		max   float64 // fraction of the file's bytes
	}{
		{"hit by ID", fieldID, "dispatch:run123:task456:1", 1, 0.015},
		{"miss by ID", fieldID, "dispatch:run123:task456:2", 0, 0.002},
		{"hit by run", fieldRunID, "run77", 1000, 0.015},
	} {
		f, err := os.Open(path)
		require.NoError(t, err)
		st, _ := f.Stat()
		cf := &countingFile{File: f}
		p, err := openParquet(path, TableDispatch, cf, st.Size())
		require.NoError(t, err)
		got, err := p.find(tc.fld, tc.value, false)
		require.NoError(t, err)
		require.Len(t, got, tc.hits, tc.name)
		frac := float64(cf.n.Load()) / float64(st.Size())
		t.Logf("%s: read %d of %d bytes (%.2f%%)", tc.name, cf.n.Load(), st.Size(), 100*frac)
		require.Less(t, frac, tc.max, tc.name)
		p.close()
	}
}
