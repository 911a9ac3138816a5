package parquetbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDisplayURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"gs://bucket":              "gs://bucket",
		"gs://bucket/":             "gs://bucket",
		"gs://bucket?prefix=prod/": "gs://bucket/prod",
		"s3://bucket?region=eu-west-1&prefix=a/b/": "s3://bucket/a/b",
		"mem://": "mem://",
	} {
		require.Equal(t, want, displayURL(in), in)
	}
}
