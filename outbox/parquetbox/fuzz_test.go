package parquetbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

// nopCloser reads a file held in memory.
type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// readEverything drives every read path of the outbox over one file: the
// checks on open, lookups by each ID column (with bloom filters and the
// page index), the projected scan of Pending, whole-row reads, full scans
// and the sorted stream of compaction. Errors are expected; panics are not.
func readEverything(t *testing.T, data []byte) {
	for _, table := range outbox.Tables() {
		p, err := openParquet("fuzz.parquet", table, nopCloser{bytes.NewReader(data)}, int64(len(data)))
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("open: %v is not a *FileError", err)
			}
			continue
		}
		_, _ = p.find(fieldID, "dispatch:fuzz:t:1", pqtable.FindOptions{CacheBloom: true})
		_, _ = p.find(fieldID, "timer:retry:fuzz:t:1:1772323200", pqtable.FindOptions{})
		_, _ = p.find(fieldCloudTaskID, "d_aaaaaaaaaaaaaaaaaaaaaaaaaa", pqtable.FindOptions{Unique: true})
		_, _ = p.find(fieldRunID, "fuzz", pqtable.FindOptions{Admit: func(rg int) bool { return rg == 0 }})
		_ = p.scanProjected(context.Background(), decidingFields, func(int, int64, *outbox.Record) {})
		for rg, n := range p.RowGroupRows() {
			if n > 0 && n < 1<<20 {
				_, _ = p.readRows(rg, []int64{0, n - 1})
			}
		}
		_ = p.scan(func(outbox.Record) error { return nil })
		if groups, err := p.ManifestGroups(); err == nil {
			for i := range groups {
				_, _ = groups[i].MayHold(fieldCloudTaskID, "d_aaaaaaaaaaaaaaaaaaaaaaaaaa", pqtable.Hash("d_aaaaaaaaaaaaaaaaaaaaaaaaaa"), bytes.NewReader(data))
			}
		}
		s := newFileStream(p, nil)
		for range 1 << 16 {
			if _, err := s.next(); err != nil {
				break
			}
		}
		s.close()
	}
}

// FuzzReadParquet feeds mutated Parquet files to the reader: whatever the
// bytes, reading returns records or a *FileError, and never panics. The
// Parquet library itself panics on some damaged files; openParquet and
// every read recover at the file boundary and report the file as damaged
// (see recoverRead). The corpus under testdata/fuzz/FuzzReadParquet holds
// files this package wrote, files DuckDB wrote, and files other
// parquet-go programs wrote with other types, encodings and codecs
// (regenerate it with go test -run TestFuzzSeeds -update).
func FuzzReadParquet(f *testing.F) {
	f.Fuzz(readEverything)
}

// fuzzSeeds are the seed files of FuzzReadParquet, by name.
func fuzzSeeds(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{}
	var buf bytes.Buffer
	var recs []outbox.Record
	for i := range 6 {
		r := dispatchRec("fuzz", fmt.Sprintf("t%d", i), "1", outbox.StatusCreated)
		r.ProcessorUUID, r.CreatedAt, r.UpdatedAt = procA, t0, t0.Add(time.Duration(i)*time.Second)
		recs = append(recs, r)
	}
	af := &memWriter{buf: &buf}
	ptrs := make([]*outbox.Record, len(recs))
	for i := range recs {
		ptrs[i] = &recs[i]
	}
	require.NoError(t, writeRecords(af, outbox.TableDispatch, ptrs))
	seeds["outbox_dispatch"] = bytes.Clone(buf.Bytes())

	buf.Reset()
	tr := timerRec("fuzz", "t", t0.Add(time.Hour), outbox.StatusPending)
	tr.UpdatedAt, tr.CreatedAt = t0, t0
	require.NoError(t, writeRecords(&memWriter{buf: &buf}, outbox.TableTimers, []*outbox.Record{&tr}))
	seeds["outbox_timers"] = bytes.Clone(buf.Bytes())

	for _, opt := range []struct {
		name string
		opts []parquet.WriterOption
	}{
		{"parquetgo_plain_uncompressed", []parquet.WriterOption{parquet.Compression(&parquet.Uncompressed)}},
		{"parquetgo_snappy_small_pages", []parquet.WriterOption{parquet.Compression(&parquet.Snappy), parquet.PageBufferSize(64)}},
		{"parquetgo_gzip_two_groups", []parquet.WriterOption{parquet.Compression(&parquet.Gzip), parquet.MaxRowsPerRowGroup(2)}},
	} {
		buf.Reset()
		var rows []otherLayout
		for i := range 4 {
			id := fmt.Sprintf("dispatch:fuzz:t%d:1", i)
			st, ct := "created", mustHash(id)
			rows = append(rows, otherLayout{Status: &st, UpdatedAt: t0, DispatchID: id, CloudTaskID: &ct, RunID: "fuzz", CreatedAt: t0})
		}
		w := parquet.NewGenericWriter[otherLayout](&buf, opt.opts...)
		_, err := w.Write(rows)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		seeds[opt.name] = bytes.Clone(buf.Bytes())
	}
	for _, glob := range []string{"testdata/foreign/*.parquet", "testdata/duckdb_small_*.parquet"} {
		paths, err := filepath.Glob(glob)
		require.NoError(t, err)
		for _, p := range paths {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			seeds[strings.TrimSuffix(filepath.Base(p), ".parquet")] = data
		}
	}
	return seeds
}

// memWriter is a storeWriter into memory.
type memWriter struct{ buf *bytes.Buffer }

func (w *memWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *memWriter) commit() error               { return nil }
func (w *memWriter) abort()                      {}

// TestFuzzSeeds reads every seed file (so the seeds run with the normal
// tests too) and, with -update, writes them into the committed corpus.
func TestFuzzSeeds(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "fuzz", "FuzzReadParquet")
	for name, data := range fuzzSeeds(t) {
		readEverything(t, data)
		if *update {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			entry := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "seed_"+name), []byte(entry), 0o644))
		}
	}
}
