package cloudblob_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	_ "github.com/ctdispatch/ctdispatch/outbox/cloudblob"
)

// TestGSURL opens an outbox by gs:// URL against fake-gcs-server, which the
// GCS client reaches through STORAGE_EMULATOR_HOST (no credentials).
func TestGSURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	// PublicHost makes the server answer the client's object downloads,
	// which go to http://<host>/<bucket>/<object>.
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1",
		Port: uint16(port), PublicHost: fmt.Sprintf("127.0.0.1:%d", port)})
	require.NoError(t, err)
	defer srv.Stop()
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "outbox-test"})
	t.Setenv("STORAGE_EMULATOR_HOST", srv.URL()[len("http://"):])

	ctx := context.Background()
	o, err := parquetbox.Open(ctx, parquetbox.Config{Root: "gs://outbox-test?prefix=prod/", LogDir: t.TempDir()})
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, outbox.AppendAndWait(ctx, o, outbox.Record{Table: outbox.TableDispatch,
			ID: fmt.Sprintf("dispatch:r:t:%d", i+1), RunID: "r", Status: outbox.StatusCreated}))
	}
	require.NoError(t, o.Close())

	list, err := srv.ListObjectsWithOptionsPaginated("outbox-test", fakestorage.ListOptions{Prefix: "prod/"})
	require.NoError(t, err)
	var schemaFiles, data []string
	for _, obj := range list.Objects {
		if strings.Contains(obj.Name, "/created_date=1970-01-01/_schema/") {
			schemaFiles = append(schemaFiles, obj.Name)
		} else {
			data = append(data, obj.Name)
		}
	}
	require.Equal(t, []string{
		"prod/deliveries/created_date=1970-01-01/_schema/empty.parquet",
		"prod/dispatch_outbox/created_date=1970-01-01/_schema/empty.parquet",
		"prod/timers/created_date=1970-01-01/_schema/empty.parquet",
	}, schemaFiles, "each table's schema file, for queries before the first publication")
	require.Len(t, data, 1, "three attempts of one task: one bucket")
	require.Regexp(t, `^prod/dispatch_outbox/created_date=[0-9-]{10}/b[0-7]of8-[0-9a-f-]{36}-0000000000000000\.parquet$`, data[0])

	ro, err := parquetbox.Open(ctx, parquetbox.Config{Root: "gs://outbox-test?prefix=prod/", ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	got, err := ro.Lookup(ctx, outbox.Query{RunID: "r"})
	require.NoError(t, err)
	require.Empty(t, ro.Damaged())
	require.Len(t, got, 3)
}
