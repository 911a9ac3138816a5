package gcsjson_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/ctdispatch/ctdispatch/internal/gcsjson"
)

// openFake serves fake-gcs-server on loopback with one bucket and opens
// gs://<bucket>?prefix=p/ through this package.
func openFake(t *testing.T) *blob.Bucket {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1",
		Port: uint16(port), PublicHost: fmt.Sprintf("127.0.0.1:%d", port)})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "b"})
	t.Setenv(gcsjson.EmulatorEnv, fmt.Sprintf("127.0.0.1:%d", port))
	b, err := blob.OpenBucket(context.Background(), "gs://b?prefix=p/")
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBucketThroughFakeGCS(t *testing.T) {
	ctx := context.Background()
	b := openFake(t)

	// Streamed writes, larger than one pipe write.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	require.NoError(t, b.WriteAll(ctx, "t/big.parquet", big, &blob.WriterOptions{ContentType: "application/vnd.apache.parquet"}))
	require.NoError(t, b.WriteAll(ctx, "t/small", []byte("hello"), nil))
	require.NoError(t, b.WriteAll(ctx, "u/other", []byte("x"), nil))

	attrs, err := b.Attributes(ctx, "t/big.parquet")
	require.NoError(t, err)
	require.Equal(t, int64(len(big)), attrs.Size)
	require.Equal(t, "application/vnd.apache.parquet", attrs.ContentType)

	// Ranged reads, as Parquet readers seek.
	r, err := b.NewRangeReader(ctx, "t/big.parquet", 1000, 10, nil)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, big[1000:1010], got)
	require.Equal(t, int64(len(big)), r.Size())
	tail, err := b.NewRangeReader(ctx, "t/big.parquet", int64(len(big))-4, -1, nil)
	require.NoError(t, err)
	got, err = io.ReadAll(tail)
	require.NoError(t, err)
	require.NoError(t, tail.Close())
	require.Equal(t, big[len(big)-4:], got)

	// Listing with a prefix and with a delimiter.
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: "t/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		keys = append(keys, fmt.Sprintf("%s %d", obj.Key, obj.Size))
	}
	require.Equal(t, []string{fmt.Sprintf("t/big.parquet %d", len(big)), "t/small 5"}, keys)
	keys = nil
	it = b.List(&blob.ListOptions{Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		keys = append(keys, fmt.Sprintf("%s %v", obj.Key, obj.IsDir))
	}
	require.Equal(t, []string{"t/ true", "u/ true"}, keys)

	// A conditional create of an existing object fails with
	// FailedPrecondition, and leaves the object as it was.
	err = b.WriteAll(ctx, "t/small", []byte("other"), &blob.WriterOptions{IfNotExist: true})
	require.Equal(t, gcerrors.FailedPrecondition, gcerrors.Code(err), "%v", err)
	data, err := b.ReadAll(ctx, "t/small")
	require.NoError(t, err)
	require.Equal(t, "hello", string(data))

	require.NoError(t, b.Copy(ctx, "t/copy", "t/small", nil))
	data, err = b.ReadAll(ctx, "t/copy")
	require.NoError(t, err)
	require.Equal(t, "hello", string(data))

	require.NoError(t, b.Delete(ctx, "t/small"))
	_, err = b.Attributes(ctx, "t/small")
	require.Equal(t, gcerrors.NotFound, gcerrors.Code(err))
	require.Equal(t, gcerrors.NotFound, gcerrors.Code(b.Delete(ctx, "t/small")))
	_, err = b.SignedURL(ctx, "t/copy", nil)
	require.Equal(t, gcerrors.Unimplemented, gcerrors.Code(err))
}

func TestOpenBucketURL(t *testing.T) {
	_, err := blob.OpenBucket(context.Background(), "gs://b?region=x")
	require.ErrorContains(t, err, `query parameter "region" is not supported; allowed: prefix`)
}
