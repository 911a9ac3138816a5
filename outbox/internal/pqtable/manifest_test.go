package pqtable

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// tableFile writes n sorted rows of the dispatch table in the layout of
// compaction outputs and returns the file.
func tableFile(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, "dispatch_outbox", "dispatch_id", pqfile.CompactLayout)
	for i := range n {
		r := tableschema.Row{ID: fmt.Sprintf("dispatch:r%06d:t:1", i), CloudTaskID: fmt.Sprintf("d_%026x", uint64(i)*0x9E3779B97F4A7C15), Status: "created"}
		require.NoError(t, w.Write(&r))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// The one block MayHold reads answers as parquet-go's whole filter does,
// for values in the file and not, by ID and by cloud_task_id.
func TestMayHoldAgreesWithTheWholeFilter(t *testing.T) {
	t.Parallel()
	data := tableFile(t, 300_000) // three row groups
	ra := bytes.NewReader(data)
	f, err := Open(ra, int64(len(data)), "dispatch_outbox", "dispatch_id")
	require.NoError(t, err)
	groups, err := f.ManifestGroups()
	require.NoError(t, err)
	require.Len(t, groups, 3)
	require.Equal(t, []int64{131072, 131072, 37856}, []int64{groups[0].Rows, groups[1].Rows, groups[2].Rows})
	require.Equal(t, "dispatch:r000000:t:1", groups[0].MinID)
	require.Equal(t, "dispatch:r299999:t:1", groups[2].MaxID)

	pf, err := parquet.OpenFile(ra, int64(len(data)))
	require.NoError(t, err)
	var admitted, checks int
	for i := 0; i < 400_000; i += 997 {
		id := fmt.Sprintf("dispatch:r%06d:t:1", i)
		cloud := fmt.Sprintf("d_%026x", uint64(i)*0x9E3779B97F4A7C15)
		for gi, rg := range pf.RowGroups() {
			for _, c := range []struct {
				fld   tableschema.Field
				col   int
				value string
			}{{tableschema.FieldID, 0, id}, {tableschema.FieldCloudTaskID, 1, cloud}} {
				want, err := rg.ColumnChunks()[c.col].BloomFilter().Check(parquet.ByteArrayValue([]byte(c.value)))
				require.NoError(t, err)
				got, err := groups[gi].MayHold(c.fld, c.value, Hash(c.value), ra)
				require.NoError(t, err)
				if groups[gi].OutOfBounds(c.fld, c.value) {
					require.False(t, got, "%s outside row group %d's bounds", c.value, gi)
				} else {
					require.Equal(t, want, got, "%s in row group %d", c.value, gi)
				}
				checks++
				if got {
					admitted++
				}
			}
		}
	}
	t.Logf("%d of %d checks admitted", admitted, checks)
}

func TestManifestRoundTripAndDamage(t *testing.T) {
	t.Parallel()
	m := &Manifest{Table: "dispatch_outbox", Files: []ManifestFile{
		{Name: "created_date=2026-03-01/compacted-1-ab.parquet", Size: 1 << 20, ModTime: 1772366400123456789, Groups: []ManifestGroup{
			{Rows: 131072, HasBounds: true, MinID: "dispatch:a:t:1", MaxID: "dispatch:m:t:1", IDBloom: Bitset{Offset: 4000, Length: 65536}, CloudBloom: Bitset{Offset: 70000, Length: 180224}},
			{Rows: 12, IDBloom: Bitset{}, CloudBloom: Bitset{Offset: 300000, Length: 32}},
		}},
		{Name: "x.parquet", Size: 100, ModTime: -5},
	}}
	data := MarshalManifest(m)
	got, err := UnmarshalManifest(data, "dispatch_outbox")
	require.NoError(t, err)
	require.Equal(t, m, got)

	_, err = UnmarshalManifest(data, "timers")
	require.EqualError(t, err, `not a usable manifest: a manifest of table "dispatch_outbox", not "timers"`)
	for n := range len(data) {
		_, err := UnmarshalManifest(data[:n], "dispatch_outbox")
		require.True(t, errors.Is(err, ErrManifest), "truncated to %d bytes: %v", n, err)
	}
	for i := range len(data) {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x10
		_, err := UnmarshalManifest(bad, "dispatch_outbox")
		require.True(t, errors.Is(err, ErrManifest), "byte %d flipped: %v", i, err)
	}

	// A checksum does not vouch for sense: a bitset outside its file, or
	// not whole blocks, is refused.
	for _, bs := range []Bitset{{Offset: 90, Length: 32}, {Offset: 0, Length: 33}} {
		m := &Manifest{Table: "t", Files: []ManifestFile{{Name: "x.parquet", Size: 100, Groups: []ManifestGroup{{Rows: 1, IDBloom: bs}}}}}
		_, err := UnmarshalManifest(MarshalManifest(m), "t")
		require.ErrorIs(t, err, ErrManifest)
		require.Contains(t, err.Error(), "bitset of")
	}
}

// FuzzUnmarshalManifest feeds mutated manifests to the decoder: whatever
// the bytes, it returns a manifest or an error matching ErrManifest, and
// never panics.
func FuzzUnmarshalManifest(f *testing.F) {
	f.Add(MarshalManifest(&Manifest{Table: "dispatch_outbox", Files: []ManifestFile{{Name: "a.parquet", Size: 4096, ModTime: 1,
		Groups: []ManifestGroup{{Rows: 10, HasBounds: true, MinID: "a", MaxID: "b", IDBloom: Bitset{Offset: 64, Length: 256}}}}}}))
	f.Add([]byte("CTDMANI1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := UnmarshalManifest(data, "dispatch_outbox")
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("%v does not match ErrManifest", err)
			}
			return
		}
		if !bytes.Equal(MarshalManifest(m), data) {
			t.Fatalf("a manifest that decodes must encode to the same bytes")
		}
	})
}
