package parquetbox

import (
	"strconv"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
)

func TestRecordLogKeepsOrderAcrossChunksAndSnapshotsStayFixed(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, recordChunk - 1, recordChunk, recordChunk + 1, 3*recordChunk + 7} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			var l recordLog
			for i := range n {
				l.add(outbox.Record{ID: "dispatch:r:t:" + strconv.Itoa(i)})
			}
			snap := l.snapshot()
			l.add(outbox.Record{ID: "dispatch:r:t:after"})

			require.Equal(t, n+1, l.len())
			var ids []string
			for _, c := range snap {
				require.LessOrEqual(t, len(c), recordChunk)
				for _, r := range c {
					ids = append(ids, r.ID)
				}
			}
			require.Len(t, ids, n, "a snapshot does not see later adds")
			for i, id := range ids {
				require.Equal(t, "dispatch:r:t:"+strconv.Itoa(i), id)
			}
			require.Equal(t, (n+1+recordChunk-1)/recordChunk, len(l.chunks), "chunks are filled before a new one starts")
		})
	}
}
