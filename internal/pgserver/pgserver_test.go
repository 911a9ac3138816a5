package pgserver

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMissingErrorSaysHowToInstall(t *testing.T) {
	t.Parallel()
	require.EqualError(t, &MissingError{Glob: binGlob},
		"needs postgresql: no initdb under /usr/lib/postgresql/*/bin; install it with: apt-get install postgresql")
}

// A directory left by a test binary that died is removed by the next
// start; one whose owner lives is kept.
func TestAbandonedDirectoriesAreRemoved(t *testing.T) {
	t.Parallel()
	abandoned, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	f, err := own(abandoned)
	require.NoError(t, err)
	require.NoError(t, f.Close()) // as the kernel does when the owner dies
	alive, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	owner, err := own(alive)
	require.NoError(t, err)
	t.Cleanup(func() { owner.Close(); os.RemoveAll(alive) })

	removeAbandoned()
	require.NoDirExists(t, abandoned)
	require.DirExists(t, alive)
}
