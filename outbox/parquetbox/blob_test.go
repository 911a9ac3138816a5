package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcp"
)

// fakeGCSBucket serves a bucket from fake-gcs-server, in process, through
// the real GCS client that gcsblob uses.
func fakeGCSBucket(t *testing.T) *blob.Bucket {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "ctdispatch-outbox"})
	b, err := gcsblob.OpenBucket(context.Background(), &gcp.HTTPClient{Client: *srv.HTTPClient()}, "ctdispatch-outbox", nil)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return blob.PrefixedBucket(b, "prod/")
}

func TestBucketStorage(t *testing.T) {
	t.Parallel()
	for name, bucket := range map[string]func(*testing.T) *blob.Bucket{
		"fake GCS": fakeGCSBucket,
		"memblob":  func(*testing.T) *blob.Bucket { return memblob.OpenBucket(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			bkt := bucket(t)
			opts := b.options(procA)
			opts.Root, opts.Bucket, opts.LogDir = "", bkt, b.root
			opts.RefreshInterval = 0 // the bucket default: 5s
			o, err := Open(ctx, opts)
			require.NoError(t, err)
			defer o.Close()

			for i := range 5 {
				require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", fmt.Sprint(i), "1", outbox.StatusPending)))
			}
			require.NoError(t, o.Flush(ctx))
			b.clock.Advance(time.Hour)
			require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "1", "1", outbox.StatusCreated)))
			require.NoError(t, outbox.AppendAndWait(ctx, o, timerRec("r", "1", t0, outbox.StatusCreated)))
			require.NoError(t, o.Flush(ctx))

			keys := listKeys(t, bkt)
			require.Equal(t, []string{
				"deliveries/" + schemaFileName,
				"dispatch_outbox/" + schemaFileName,
				"dispatch_outbox/created_date=2026-03-01/" + procA + "-0000000000000000.parquet",
				"dispatch_outbox/created_date=2026-03-01/" + procA + "-0000000000000001.parquet",
				"timers/" + schemaFileName,
				"timers/created_date=2026-03-01/" + procA + "-0000000000000001.parquet",
			}, keys)
			require.NoError(t, bkt.WriteAll(ctx, "dispatch_outbox/created_date=2026-03-01/broken.parquet", []byte("no"), nil))

			// Another process reads the same bucket.
			ro, err := Open(ctx, Config{Bucket: bkt, ReadOnly: true})
			require.NoError(t, err)
			defer ro.Close()
			for _, ob := range []*Outbox{o, ro} {
				got, ok, err := ob.Latest(ctx, outbox.TableDispatch, "dispatch:r:1:1")
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, outbox.StatusCreated, got.Status)
				hist, err := ob.Lookup(ctx, outbox.Query{RunID: "r", History: true})
				require.NoError(t, err)
				require.Len(t, hist, 7)
			}
			require.Len(t, ro.Damaged(), 1)
			require.Equal(t, "bucket:/dispatch_outbox/created_date=2026-03-01/broken.parquet", ro.Damaged()[0].Path)
			require.NoError(t, bkt.Delete(ctx, "dispatch_outbox/created_date=2026-03-01/broken.parquet"))

			st, err := ro.compact(ctx, CompactConfig{Retention: Retention{"*": 0}})
			require.NoError(t, err)
			require.Equal(t, int64(4), st.Tables[0].RowsOut, "four pending kept, one created dropped")
			require.Equal(t, int64(1), st.Tables[0].Dropped)
			keys = listKeys(t, bkt)
			require.Len(t, keys, 9, "%v", keys)
			require.Equal(t, "_commits/dispatch_outbox/created_date=2026-03-01.000000000001", keys[0])
			require.Equal(t, "_commits/timers/created_date=2026-03-01.000000000001", keys[1], "the timer's unit was dropped whole")
			require.Equal(t, "_leases/dispatch_outbox/created_date=2026-03-01.000000000000", keys[2])
			require.Equal(t, "_leases/timers/created_date=2026-03-01.000000000000", keys[3])
			require.Equal(t, "_manifests/dispatch_outbox", keys[4], "the timers table has no file to list")
			require.Equal(t, []string{"deliveries/" + schemaFileName, "dispatch_outbox/" + schemaFileName}, keys[5:7], "compaction leaves the schema files alone")
			require.True(t, strings.HasPrefix(keys[7], "dispatch_outbox/created_date=2026-03-01/compacted-"), keys[7])
			require.Equal(t, "timers/"+schemaFileName, keys[8])
			require.Equal(t, ManifestWritten, st.Tables[0].Manifest.Action)
			require.Equal(t, 1, st.Tables[0].Manifest.Files)
			// o's cached listing still names the files ro compacted away:
			// reading one fails as not found, o lists again and finds the
			// compacted file; nothing is reported damaged.
			pending, err := o.Pending(ctx, outbox.TableDispatch, time.Minute)
			require.NoError(t, err)
			require.Len(t, pending, 4)
			require.Empty(t, o.Damaged())

			// A file another process adds appears once o's listing expires
			// (5s for a bucket).
			other := filepath.Join(t.TempDir(), "other.parquet")
			rec := dispatchRec("r", "other", "1", outbox.StatusCreated)
			rec.UpdatedAt, rec.CreatedAt = t0, t0
			require.NoError(t, writeParquet(other, outbox.TableDispatch, []outbox.Record{rec}))
			data, err := os.ReadFile(other)
			require.NoError(t, err)
			require.NoError(t, bkt.WriteAll(ctx, "dispatch_outbox/created_date=2026-03-01/other.parquet", data, nil))
			_, ok, err := o.Latest(ctx, outbox.TableDispatch, rec.ID)
			require.NoError(t, err)
			require.False(t, ok, "listing still cached")
			b.clock.Advance(5 * time.Second)
			_, ok, err = o.Latest(ctx, outbox.TableDispatch, rec.ID)
			require.NoError(t, err)
			require.True(t, ok)
		})
	}
}

func listKeys(t *testing.T, b *blob.Bucket) []string {
	t.Helper()
	var keys []string
	it := b.List(nil)
	for {
		obj, err := it.Next(context.Background())
		if err != nil {
			break
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

func TestBucketURLRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, err := Open(ctx, Config{Root: "mem://", LogDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("r", "t", "1", outbox.StatusCreated)))
	require.NoError(t, o.Flush(ctx))
	got, err := o.Lookup(ctx, outbox.Query{ID: "dispatch:r:t:1"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, o.Close())
}
