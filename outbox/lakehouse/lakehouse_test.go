package lakehouse_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Time budget: under a second. The file-based catalog cannot commit
// atomically in a bucket, so Enable refuses it there and says which
// option to set.
func TestFileCatalogRefusedOnBucketRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: "mem://", LogDir: t.TempDir(), ProcessorUUID: uuid.New()})
	require.NoError(t, err)
	defer ob.Close()
	err = lakehouse.Enable(ctx, ob, lakehouse.Config{})
	require.ErrorContains(t, err, "Config.Catalog")
	require.ErrorContains(t, err, "cannot commit atomically on bucket root mem://")
	_, on, err := lakehouse.Enabled(ctx, ob)
	require.NoError(t, err)
	require.False(t, on, "nothing was switched on")

	// An opened bucket (Config.Bucket) is a bucket root too, by the URL
	// it is read by; without that URL nothing can name its files.
	opened, err := parquetbox.Open(ctx, parquetbox.Config{Bucket: memblob.OpenBucket(nil), BucketURL: "gs://lake/prod", LogDir: t.TempDir(), ProcessorUUID: uuid.New()})
	require.NoError(t, err)
	defer opened.Close()
	require.EqualError(t, lakehouse.Enable(ctx, opened, lakehouse.Config{}),
		`lakehouse: the file-based catalog (Config.Catalog "") cannot commit atomically on bucket root gs://lake/prod; set Config.Catalog to a postgres:// (SQL catalog) or https:// (REST catalog) URL`)
	unnamed, err := parquetbox.Open(ctx, parquetbox.Config{Bucket: memblob.OpenBucket(nil), LogDir: t.TempDir(), ProcessorUUID: uuid.New()})
	require.NoError(t, err)
	defer unnamed.Close()
	require.ErrorContains(t, lakehouse.Enable(ctx, unnamed, lakehouse.Config{Catalog: "postgres://u@h/db"}), "Config.BucketURL is empty")
}

// Time budget: a few seconds (go list). A program that only dispatches,
// or only keeps an outbox, links no Iceberg or Arrow code.
func TestDispatchingLinksNoIceberg(t *testing.T) {
	t.Parallel()
	pkgs := []string{
		"github.com/ctdispatch/ctdispatch/cloudtasks",
		"github.com/ctdispatch/ctdispatch/timers",
		"github.com/ctdispatch/ctdispatch/outbox",
		"github.com/ctdispatch/ctdispatch/outbox/parquetbox",
		"github.com/ctdispatch/ctdispatch/outbox/pgbox",
		"github.com/ctdispatch/ctdispatch/cloudtasks/worker",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.False(t, strings.HasPrefix(dep, "github.com/apache/iceberg-go"), "links %s", dep)
		require.False(t, strings.HasPrefix(dep, "github.com/apache/arrow-go"), "links %s", dep)
	}
	require.Contains(t, string(out), "github.com/ctdispatch/ctdispatch/outbox/parquetbox", "the list is real")
}
