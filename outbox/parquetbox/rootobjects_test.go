package parquetbox

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"
)

// Root objects live under _iceberg/ only, are created atomically, and
// read back as written.
func TestRootObjects(t *testing.T) {
	t.Parallel()
	for _, storage := range []string{"directory", "fake GCS"} {
		t.Run(storage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			o := newLakeRoot(t, storage).open(t, "")
			_, err := o.GetRootObject(ctx, PublicationKey)
			require.ErrorIs(t, err, fs.ErrNotExist)
			created, err := o.CreateRootObject(ctx, PublicationKey, []byte("one"))
			require.NoError(t, err)
			require.True(t, created)
			created, err = o.CreateRootObject(ctx, PublicationKey, []byte("two"))
			require.NoError(t, err)
			require.False(t, created)
			got, err := o.GetRootObject(ctx, PublicationKey)
			require.NoError(t, err)
			require.Equal(t, "one", string(got))
			require.NoError(t, o.PutRootObject(ctx, PublicationKey, []byte("three")))
			got, err = o.GetRootObject(ctx, PublicationKey)
			require.NoError(t, err)
			require.Equal(t, "three", string(got))
			for _, k := range []string{"_iceberg/leases/t.000002", "_iceberg/leases/t.000001", "_iceberg/leases/u.000001", "_iceberg/leases/t.x/y"} {
				require.NoError(t, o.PutRootObject(ctx, k, nil))
			}
			keys, err := o.RootObjectKeys(ctx, "_iceberg/leases/t.")
			require.NoError(t, err)
			require.Equal(t, []string{"_iceberg/leases/t.000001", "_iceberg/leases/t.000002"}, keys)
			keys, err = o.RootObjectKeys(ctx, "_iceberg/")
			require.NoError(t, err)
			require.Equal(t, []string{PublicationKey}, keys)
			require.NoError(t, o.DeleteRootObject(ctx, PublicationKey))
			require.NoError(t, o.DeleteRootObject(ctx, PublicationKey), "a missing key is not an error")
			_, err = o.GetRootObject(ctx, PublicationKey)
			require.ErrorIs(t, err, fs.ErrNotExist)

			for _, key := range []string{"", "_iceberg", "_iceberg/", "_leases/dispatch_outbox/x.000001", "dispatch_outbox/created_date=2026-03-01/x.parquet",
				"_iceberg/../_commits/x", "_iceberg//x", "_iceberg/a/", "_iceberg/.tmp-x", "/_iceberg/x"} {
				want := fmt.Sprintf("outbox: root object key %q: want _iceberg/<name>, in clean form, no element empty or starting with \".\"", key)
				require.EqualError(t, o.PutRootObject(ctx, key, nil), want)
				_, err := o.CreateRootObject(ctx, key, nil)
				require.EqualError(t, err, want)
				_, err = o.GetRootObject(ctx, key)
				require.EqualError(t, err, want)
				require.EqualError(t, o.DeleteRootObject(ctx, key), want)
			}
			_, err = o.RootObjectKeys(ctx, "_leases/")
			require.EqualError(t, err, `outbox: root object prefix "_leases/": want _iceberg/ or a prefix of a key under it`)
			require.NoError(t, o.Close())
			require.ErrorIs(t, o.PutRootObject(ctx, PublicationKey, nil), ErrClosed)
		})
	}
}
