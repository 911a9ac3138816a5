package cli

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A dispatcher over a file outbox runs under a soft memory limit unless
// GOMEMLIMIT is set; without an outbox the limit is left alone.
func TestDispatcherMemoryLimit(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	cases := []struct {
		name      string
		gomem     string
		outbox    bool
		wantLimit []int64
	}{
		{name: "file outbox", outbox: true, wantLimit: []int64{160 << 20}},
		{name: "GOMEMLIMIT set", gomem: "1GiB", outbox: true, wantLimit: nil},
		{name: "GOMEMLIMIT off", gomem: "off", outbox: true, wantLimit: nil},
		{name: "no outbox", wantLimit: nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []int64
			var out, errb bytes.Buffer
			env := Env{Out: &out, Err: &errb, In: strings.NewReader(""),
				Getenv: func(k string) string {
					switch k {
					case emulatorEnv:
						return emu.Addr()
					case "GOMEMLIMIT":
						return tc.gomem
					}
					return ""
				},
				SetMemoryLimit: func(n int64) int64 { got = append(got, n); return n },
			}
			args := append(append([]string(nil), dispatchArgs...), "--run", "r", "--task", fmt.Sprint("t", i), "--attempt", "1", "--url", "https://worker.example/x")
			if tc.outbox {
				args = append(args, "--outbox", filepath.Join(t.TempDir(), "outbox"))
			}
			code := Run(context.Background(), args, env)
			require.Equal(t, 0, code, errb.String())
			require.Equal(t, tc.wantLimit, got)
		})
	}
}

// compact runs under the same soft memory limit unless GOMEMLIMIT is set.
func TestCompactMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, gomem := range []string{"", "1GiB"} {
		var got []int64
		var out, errb bytes.Buffer
		env := Env{Out: &out, Err: &errb, In: strings.NewReader(""),
			Getenv: func(k string) string {
				if k == "GOMEMLIMIT" {
					return gomem
				}
				return ""
			},
			SetMemoryLimit: func(n int64) int64 { got = append(got, n); return n },
		}
		code := Run(context.Background(), []string{"compact", "--outbox", t.TempDir()}, env)
		require.Equal(t, 0, code, errb.String())
		if gomem == "" {
			require.Equal(t, []int64{160 << 20}, got)
		} else {
			require.Empty(t, got)
		}
	}
}
