package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the ctdispatch executable the children run, built once
// without the race detector: the children are separate programs, and the
// suite's multi-process sizes would be slow if instrumented.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ctdispatch-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "ctdispatch")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build ctdispatch: %v\n%s", err, stderr.String())
		return 1
	}
	return m.Run()
}

func TestScenarioQuick(t *testing.T) {
	var out bytes.Buffer
	only := os.Getenv("CHAOS_ONLY")
	rep, err := Run(context.Background(), Options{Seed: 1, Binary: binary, Out: &out, Only: []string{only}})
	t.Log(out.String())
	if err != nil || !rep.OK() {
		t.Fatal(err, rep)
	}
}
