package naming_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
)

// dispatchSlot is the attempt slot of the dispatch ID identity makes for
// task extract of run1.
func dispatchSlot(t *testing.T, identity naming.Identity) string {
	t.Helper()
	id, err := naming.NewDispatch("run1", "extract", identity)
	require.NoError(t, err)
	return id.Attempt()
}

func TestCallerKey(t *testing.T) {
	t.Parallel()
	a := dispatchSlot(t, naming.CallerKey("evt-42"))
	require.Equal(t, "k-kdfo6u43zxiplof3rajyylplvs", a)
	require.Equal(t, a, dispatchSlot(t, naming.CallerKey("evt-42")), "the same key on the same task must give the same attempt")

	other, err := naming.NewDispatch("run1", "load", naming.CallerKey("evt-42"))
	require.NoError(t, err)
	require.NotEqual(t, a, other.Attempt(), "one key on two task kinds must not collide")

	// Moving a character between task key and caller key changes the hash.
	x, err := naming.NewDispatch("r", "ab", naming.CallerKey("c"))
	require.NoError(t, err)
	y, err := naming.NewDispatch("r", "a", naming.CallerKey("bc"))
	require.NoError(t, err)
	require.NotEqual(t, x.Attempt(), y.Attempt())

	timer, err := naming.NewRetryTimer("run1", "extract", naming.CallerKey("evt-42"), time.Unix(1705340400, 0))
	require.NoError(t, err)
	require.Equal(t, "timer:retry:run1:extract:k-kdfo6u43zxiplof3rajyylplvs:1705340400", timer.String(),
		"a retry timer names the attempt it starts as that attempt's dispatch does")
}

func TestCallerKeyRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		task    string
		key     string
		want    string
		missing bool
	}{
		{"empty", "extract", "", `idempotency key "" is missing; naming.CallerKey needs a non-empty key`, true},
		{"too long", "extract", strings.Repeat("k", naming.MaxKeyLength+1), `idempotency key "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk…" is 1025 bytes long; at most 1024 allowed`, false},
		{"not UTF-8", "extract", "\xff", `idempotency key "\xff" is not valid UTF-8`, false},
		{"bad task key", "bad key", "k", `task_key "bad key" contains whitespace (' '); allowed: [A-Za-z0-9._-]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := naming.NewDispatch("run1", tt.task, naming.CallerKey(tt.key))
			require.ErrorIs(t, err, naming.ErrInvalidID)
			require.EqualError(t, err, "invalid internal ID: "+tt.want)
			require.Equal(t, tt.missing, errors.Is(err, naming.ErrMissingKey))
		})
	}
}

func TestUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		a := dispatchSlot(t, naming.Unique())
		require.False(t, seen[a], "duplicate unique attempt %s", a)
		seen[a] = true
		require.True(t, strings.HasPrefix(a, "u-"))
		u, err := uuid.Parse(a[2:])
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), u.Version())
	}
}

func TestIdentitySlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   naming.Identity
		want string
		text string
	}{
		{"Attempt", naming.Attempt(12), "12", "attempt 12"},
		{"Attempt(0) is said, so it is attempt 0", naming.Attempt(0), "0", "attempt 0"},
		{"CallerKey", naming.CallerKey("evt-42"), "k-kdfo6u43zxiplof3rajyylplvs", `caller key "evt-42"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, dispatchSlot(t, tt.in))
			require.Equal(t, tt.text, tt.in.String())
			require.False(t, tt.in.IsZero())
		})
	}
	require.Equal(t, "unique", naming.Unique().String())
	require.False(t, naming.Unique().IsZero())
}

// The zero Identity, the one value a user can write without a
// constructor, is refused by every constructor that needs an attempt, and
// the error names it: a forgotten attempt is never attempt 0.
func TestZeroIdentityRefused(t *testing.T) {
	t.Parallel()
	var zero naming.Identity
	require.True(t, zero.IsZero())
	require.Equal(t, "", zero.String())
	const want = `invalid internal ID: identity "" is not set: the request must say which attempt it is; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()`
	_, err := naming.NewDispatch("run1", "extract", zero)
	require.ErrorIs(t, err, naming.ErrInvalidID)
	require.EqualError(t, err, want)
	var e *naming.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "identity", e.Component)
	_, err = naming.NewRetryTimer("run1", "extract", zero, time.Unix(1705340400, 0))
	require.EqualError(t, err, want)
}

func TestPayloadFingerprint(t *testing.T) {
	t.Parallel()
	const emptySHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	tests := []struct {
		name string
		body string
		want string
	}{
		{"empty body hashes as raw bytes", "", emptySHA},
		{"json object", `{"a":1,"b":[true,null]}`, "1cc69c7fa23616ca2ec3ee70d24390a6225c8832db8a4c814c7e0e7f942f8668"},
		{"key order and space do not matter", " { \"b\" : [ true , null ] ,\n \"a\" : 1 } ", "1cc69c7fa23616ca2ec3ee70d24390a6225c8832db8a4c814c7e0e7f942f8668"},
		{"number forms are canonical", `{"a":1.0,"b":[true,null]}`, "1cc69c7fa23616ca2ec3ee70d24390a6225c8832db8a4c814c7e0e7f942f8668"},
		{"non-json is raw", "hello", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, naming.PayloadFingerprint([]byte(tt.body)))
		})
	}
	require.NotEqual(t, naming.PayloadFingerprint([]byte(`{"a":1}`)), naming.PayloadFingerprint([]byte(`{"a":2}`)))
}
