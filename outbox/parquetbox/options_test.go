package parquetbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOptionsDefaultBudgets pins the memory budgets a dispatcher gets
// without setting them; BENCHMARKS.md measures its RSS with these.
func TestOptionsDefaultBudgets(t *testing.T) {
	t.Parallel()
	o := Config{}.WithDefaults()
	require.Equal(t, int64(32<<20), o.IndexBytes)
	require.Equal(t, 1_000_000, o.IndexLimit)
	require.Equal(t, 256, o.MaxOpenFiles)
	require.Equal(t, int64(64<<20), o.FileCacheBytes)
	require.Equal(t, int64(16<<20), o.SegmentMaxBytes)
	require.Equal(t, 30*time.Second, o.PublishInterval, "docs/outbox.md promises DuckDB sees a record within a minute")
}
