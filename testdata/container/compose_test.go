package container_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestComposeServiceStartedByScript(t *testing.T) {
	t.Parallel()
	// compose.yaml gives the service --queue work.
	checkEmulator(t, getenv(t, composeGRPCEnv), getenv(t, composePublicURLEnv), "projects/p/locations/europe-west1/queues/work")
}

// readRepoFile reads a file of the ctdispatch checkout this module sits in.
func readRepoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	require.NoError(t, err)
	return string(b)
}

// TestDocsShowTheTestedCode holds docs/emulator.md to the code the tests
// run: the compose file and the testcontainers-go snippet appear in it
// verbatim.
func TestDocsShowTheTestedCode(t *testing.T) {
	t.Parallel()
	docs := readRepoFile(t, "docs/emulator.md")
	compose := readRepoFile(t, "testdata/container/compose.yaml")
	require.Contains(t, docs, "```yaml\n"+compose+"```\n", "docs/emulator.md must show testdata/container/compose.yaml as it is")

	src := readRepoFile(t, "testdata/container/testcontainers_test.go")
	start := strings.Index(src, "func startEmulator(")
	end := strings.Index(src[start:], "\n}\n")
	require.True(t, start >= 0 && end >= 0, "startEmulator not found in testcontainers_test.go")
	snippet := src[start : start+end+3]
	require.Contains(t, docs, snippet, "docs/emulator.md must show startEmulator from testcontainers_test.go as it is")
}

// TestComposeFileFitsTheImage parses compose.yaml and checks it against
// the Dockerfile: the ports it publishes are the ones the image exposes,
// on loopback, and it sets the public URL to the published key port.
func TestComposeFileFitsTheImage(t *testing.T) {
	t.Parallel()
	var f struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	dec := yaml.NewDecoder(strings.NewReader(readRepoFile(t, "testdata/container/compose.yaml")))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&f))
	svc, ok := f.Services["cloudtasks"]
	require.True(t, ok, "service cloudtasks")
	require.Equal(t, "${CTDISPATCH_IMAGE:-ctdispatch-emulator:dev}", svc.Image, "the tag make image builds")
	require.Equal(t, []string{"--queue", "work", "--name-reuse-window", "1m"}, svc.Command)
	require.Equal(t, map[string]string{"CTDISPATCH_EMULATOR_PUBLIC_URL": "http://localhost:${CTDISPATCH_HTTP_PORT:-8124}"}, svc.Environment)
	require.Equal(t, []string{"127.0.0.1:${CTDISPATCH_GRPC_PORT:-8123}:8123", "127.0.0.1:${CTDISPATCH_HTTP_PORT:-8124}:8124"}, svc.Ports)

	dockerfile := readRepoFile(t, "Dockerfile")
	require.Regexp(t, regexp.MustCompile(`(?m)^EXPOSE 8123 8124$`), dockerfile)
	require.Regexp(t, regexp.MustCompile(`(?m)^ENTRYPOINT \["/ctdispatch", "emulator", "--addr", "0\.0\.0\.0:8123", "--http-addr", "0\.0\.0\.0:8124"\]$`), dockerfile)
	require.Contains(t, readRepoFile(t, "Makefile"), "IMAGE ?= ctdispatch-emulator:dev")
}
