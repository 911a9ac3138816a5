package naming_test

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestCloudTaskIDVectors(t *testing.T) {
	t.Parallel()
	// The two reference vectors of the naming convention.
	tests := []struct{ internal, want string }{
		{"dispatch:run1:extract:1", "d_cxtoltqhbncw6nevn7hy53kqn6"},
		{"timer:retry:run1:extract:1:1705340400", "t_hlljqq57362d4n3x2kett7jrqf"},
	}
	for _, tt := range tests {
		got, err := naming.CloudTaskID(tt.internal)
		require.NoError(t, err)
		require.Equal(t, tt.want, got, tt.internal)
		id, err := naming.Parse(tt.internal)
		require.NoError(t, err)
		require.Equal(t, tt.want, id.CloudTaskID())
	}
}

// TestCloudTaskIDGolden checks every ID in testdata/cloud_task_ids.golden
// (internal ID, tab, Cloud Tasks ID). Run with -update to regenerate the
// right-hand column after a deliberate change.
func TestCloudTaskIDGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "cloud_task_ids.golden")
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out strings.Builder
	var n int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		internal, want, ok := strings.Cut(line, "\t")
		require.True(t, ok, "golden line without a tab: %q", line)
		got, err := naming.CloudTaskID(internal)
		require.NoError(t, err, internal)
		fmt.Fprintf(&out, "%s\t%s\n", internal, got)
		if !*update {
			require.Equal(t, want, got, internal)
		}
		n++
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, n, 20)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(out.String()), 0o644))
	}
}

func TestParseRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want parts
	}{
		{"dispatch:run1:extract:1", parts{kind: naming.KindDispatch, run: "run1", task: "extract", attempt: "1"}},
		{"dispatch:R-2024.01_a:load.v2:0", parts{kind: naming.KindDispatch, run: "R-2024.01_a", task: "load.v2", attempt: "0"}},
		{"dispatch:r:t:k-abcdefghijklmnopqrstuvwxyz", parts{kind: naming.KindDispatch, run: "r", task: "t", attempt: "k-abcdefghijklmnopqrstuvwxyz"}},
		{"dispatch:r:t:01HMQ3", parts{kind: naming.KindDispatch, run: "r", task: "t", attempt: "01HMQ3"}},
		{"timer:retry:run1:extract:1:1705340400", parts{kind: naming.KindRetry, run: "run1", task: "extract", attempt: "1", epoch: 1705340400}},
		{"timer:retry:r:t:2:0", parts{kind: naming.KindRetry, run: "r", task: "t", attempt: "2", epoch: 0}},
		{"timer:heartbeat:run1:extract:1705340460", parts{kind: naming.KindHeartbeat, run: "run1", task: "extract", epoch: 1705340460}},
		{"timer:heartbeat:r:t:253402300799", parts{kind: naming.KindHeartbeat, run: "r", task: "t", epoch: naming.MaxEpoch}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := naming.Parse(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, partsOf(got))
			require.Equal(t, tt.in, got.String())
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantMsg string
	}{
		{"", `invalid internal ID: prefix "" must be "dispatch:", "timer:retry:" or "timer:heartbeat:"`},
		{"task:r:t:1", `invalid internal ID "task:r:t:1": prefix "task:" must be "dispatch:", "timer:retry:" or "timer:heartbeat:"`},
		{"dispatch:r:t", `invalid internal ID "dispatch:r:t": a dispatch ID has 3 components after its prefix, separated by ':'; found 2`},
		{"dispatch:r:a:b:1", `invalid internal ID "dispatch:r:a:b:1": a dispatch ID has 3 components after its prefix, separated by ':'; found 4`},
		{"dispatch::t:1", `invalid internal ID "dispatch::t:1": run_id "" is empty; it needs 1 to 100 characters from [A-Za-z0-9._-]`},
		{"dispatch:r a:t:1", `invalid internal ID "dispatch:r a:t:1": run_id "r a" contains whitespace (' '); allowed: [A-Za-z0-9._-]`},
		{"dispatch:r:t\x00:1", `invalid internal ID "dispatch:r:t\x00:1": task_key "t\x00" contains a control character ('\x00'); allowed: [A-Za-z0-9._-]`},
		{"dispatch:r:tä:1", `invalid internal ID "dispatch:r:tä:1": task_key "tä" contains 'ä'; allowed: [A-Za-z0-9._-]`},
		{"dispatch:r:t:01", `invalid internal ID "dispatch:r:t:01": attempt "01" has a leading zero; attempt numbers are written in canonical decimal ("1", not "01")`},
		{"dispatch:r:t:99999999999999999999", `invalid internal ID "dispatch:r:t:99999999999999999999": attempt "99999999999999999999" is out of range; attempt numbers fit in 64 bits`},
		{"dispatch:r:t:", `invalid internal ID "dispatch:r:t:": attempt "" is empty; it needs 1 to 64 characters from [A-Za-z0-9._-]`},
		{"timer:retry:r:t:1:0170", `invalid internal ID "timer:retry:r:t:1:0170": due_epoch "0170" has a leading zero; epochs are written in canonical decimal`},
		{"timer:retry:r:t:1:-5", `invalid internal ID "timer:retry:r:t:1:-5": due_epoch "-5" must be whole seconds since the Unix epoch, in decimal digits`},
		{"timer:retry:r:t:1:+5", `invalid internal ID "timer:retry:r:t:1:+5": due_epoch "+5" must be whole seconds since the Unix epoch, in decimal digits`},
		{"timer:retry:r:t:1:253402300800", `invalid internal ID "timer:retry:r:t:1:253402300800": due_epoch "253402300800" is out of range; allowed: 0 to 253402300799 seconds since the Unix epoch`},
		{"timer:heartbeat:r:t:1:5", `invalid internal ID "timer:heartbeat:r:t:1:5": a heartbeat ID has 3 components after its prefix, separated by ':'; found 4`},
		{"timer:heartbeat:r:t:1.5", `invalid internal ID "timer:heartbeat:r:t:1.5": check_epoch "1.5" must be whole seconds since the Unix epoch, in decimal digits`},
		{"timer:r:t:1", `invalid internal ID "timer:r:t:1": prefix "timer:" must be "dispatch:", "timer:retry:" or "timer:heartbeat:"`},
		{"DISPATCH:r:t:1", `invalid internal ID "DISPATCH:r:t:1": prefix "DISPATCH:" must be "dispatch:", "timer:retry:" or "timer:heartbeat:"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := naming.Parse(tt.in)
			require.Error(t, err)
			require.ErrorIs(t, err, naming.ErrInvalidID)
			require.Equal(t, tt.wantMsg, err.Error())
			var ne *naming.Error
			require.True(t, errors.As(err, &ne))
			require.Equal(t, tt.in, ne.Input)
		})
	}
}

func TestParseRejectsOverlongInput(t *testing.T) {
	t.Parallel()
	long := "dispatch:" + strings.Repeat("r", 101) + ":t:1"
	_, err := naming.Parse(long)
	require.ErrorIs(t, err, naming.ErrInvalidID)
	require.Contains(t, err.Error(), `run_id "`+strings.Repeat("r", 101)+`" is 101 bytes long; at most 100 allowed`)

	huge := strings.Repeat("x", naming.MaxIDLength+1)
	_, err = naming.Parse(huge)
	require.ErrorIs(t, err, naming.ErrInvalidID)
	require.Equal(t, `invalid internal ID "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…": it is 292 bytes long; at most 291 allowed`, err.Error())
}

func TestLongestIDFitsTheLimit(t *testing.T) {
	t.Parallel()
	// No identity fills the slot to its limit, but Parse accepts any valid
	// slot, so the bound is checked on the text.
	longest := "timer:retry:" + strings.Repeat("r", naming.MaxComponentLength) + ":" + strings.Repeat("t", naming.MaxComponentLength) +
		":" + strings.Repeat("a", naming.MaxAttemptLength) + ":253402300799"
	id, err := naming.Parse(longest)
	require.NoError(t, err)
	require.Len(t, id.String(), naming.MaxIDLength)
	require.Equal(t, 291, naming.MaxIDLength)
	require.Equal(t, time.Unix(naming.MaxEpoch, 0).UTC(), id.Time())
}

func TestConstructors(t *testing.T) {
	t.Parallel()
	due := time.Date(2024, 1, 15, 17, 40, 0, 999_000_000, time.UTC)

	d, err := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	require.NoError(t, err)
	require.Equal(t, "dispatch:run1:extract:1", d.String())
	require.False(t, d.IsTimer())
	require.True(t, d.Time().IsZero())

	r, err := naming.NewRetryTimer("run1", "extract", naming.Attempt(1), due)
	require.NoError(t, err)
	require.Equal(t, "timer:retry:run1:extract:1:1705340400", r.String())
	require.True(t, r.IsTimer())
	require.Equal(t, time.Date(2024, 1, 15, 17, 40, 0, 0, time.UTC), r.Time())

	h, err := naming.NewHeartbeat("run1", "extract", due.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "timer:heartbeat:run1:extract:1705340460", h.String())
	require.Equal(t, "t_", h.CloudTaskID()[:2])

	_, err = naming.NewDispatch("run:1", "extract", naming.Attempt(1))
	require.EqualError(t, err, `invalid internal ID: run_id "run:1" contains ':' (the separator); allowed: [A-Za-z0-9._-]`)
	_, err = naming.NewRetryTimer("r", "t", naming.Attempt(1), time.Unix(-1, 0))
	require.EqualError(t, err, `invalid internal ID: due_epoch "-1" is out of range; allowed: 0 to 253402300799 seconds since the Unix epoch`)
}

func TestZeroID(t *testing.T) {
	t.Parallel()
	var id naming.ID
	require.True(t, id.IsZero())
	require.Equal(t, "", id.String())
	require.Equal(t, "", id.CloudTaskID())
	_, err := naming.NewRetryTimer("r", "t", naming.Identity{}, time.Unix(5, 0))
	require.EqualError(t, err, `invalid internal ID: identity "" is not set: the request must say which attempt it is; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()`)
}

func TestKindText(t *testing.T) {
	t.Parallel()
	for _, k := range []naming.Kind{naming.KindDispatch, naming.KindRetry, naming.KindHeartbeat} {
		back, err := naming.ParseKind(k.String())
		require.NoError(t, err)
		require.Equal(t, k, back)
	}
	_, err := naming.ParseKind("timer")
	require.EqualError(t, err, `invalid internal ID: kind "timer" must be dispatch, retry or heartbeat`)
}

func TestIsCloudTaskID(t *testing.T) {
	t.Parallel()
	require.True(t, naming.IsCloudTaskID("d_cxtoltqhbncw6nevn7hy53kqn6"))
	require.False(t, naming.IsCloudTaskID("d_cxtoltqhbncw6nevn7hy53kqn"))
	require.False(t, naming.IsCloudTaskID("x_cxtoltqhbncw6nevn7hy53kqn6"))
	require.False(t, naming.IsCloudTaskID("d_CXTOLTQHBNCW6NEVN7HY53KQN6"))
	require.False(t, naming.IsCloudTaskID("d_cxtoltqhbncw6nevn7hy53kqn6\n"))
}

// parts is an ID's accessors gathered for comparison in tables.
type parts struct {
	kind    naming.Kind
	run     string
	task    string
	attempt string
	epoch   int64
}

func partsOf(id naming.ID) parts {
	return parts{kind: id.Kind(), run: id.RunID(), task: id.TaskKey(), attempt: id.Attempt(), epoch: id.Epoch()}
}
