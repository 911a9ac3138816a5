package naming_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
)

func TestAttemptFromKey(t *testing.T) {
	t.Parallel()
	a, err := naming.AttemptFromKey("extract", "evt-42")
	require.NoError(t, err)
	require.Equal(t, "k-kdfo6u43zxiplof3rajyylplvs", a)

	again, err := naming.AttemptFromKey("extract", "evt-42")
	require.NoError(t, err)
	require.Equal(t, a, again, "the same key on the same task must give the same attempt")

	other, err := naming.AttemptFromKey("load", "evt-42")
	require.NoError(t, err)
	require.NotEqual(t, a, other, "one key on two task kinds must not collide")

	// Moving a character between task key and caller key changes the hash.
	x, err := naming.AttemptFromKey("ab", "c")
	require.NoError(t, err)
	y, err := naming.AttemptFromKey("a", "bc")
	require.NoError(t, err)
	require.NotEqual(t, x, y)

	id, err := naming.NewDispatch("run1", "extract", a)
	require.NoError(t, err, "a key attempt is a valid attempt slot")
	require.Equal(t, "dispatch:run1:extract:k-kdfo6u43zxiplof3rajyylplvs", id.String())
}

func TestAttemptFromKeyRejects(t *testing.T) {
	t.Parallel()
	_, err := naming.AttemptFromKey("extract", "")
	require.ErrorIs(t, err, naming.ErrMissingKey)
	require.ErrorIs(t, err, naming.ErrInvalidID)
	require.EqualError(t, err, `invalid internal ID: idempotency key "" is missing; the caller-key strategy needs a non-empty key`)

	_, err = naming.AttemptFromKey("extract", strings.Repeat("k", naming.MaxKeyLength+1))
	require.EqualError(t, err, `invalid internal ID: idempotency key "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk…" is 1025 bytes long; at most 1024 allowed`)
	require.NotErrorIs(t, err, naming.ErrMissingKey)

	_, err = naming.AttemptFromKey("extract", "\xff")
	require.EqualError(t, err, `invalid internal ID: idempotency key "\xff" is not valid UTF-8`)

	_, err = naming.AttemptFromKey("bad key", "k")
	require.EqualError(t, err, `invalid internal ID: task_key "bad key" contains whitespace (' '); allowed: [A-Za-z0-9._-]`)
}

func TestAttemptUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		a := naming.AttemptUnique()
		require.False(t, seen[a], "duplicate unique attempt %s", a)
		seen[a] = true
		require.True(t, strings.HasPrefix(a, "u-"))
		u, err := uuid.Parse(a[2:])
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), u.Version())
		_, err = naming.NewDispatch("r", "t", a)
		require.NoError(t, err)
	}
}

func TestIdentityAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   naming.Identity
		want string
	}{
		{"strict", naming.Attempt(12), "12"},
		{"Attempt", naming.Attempt(12), "12"},
		{"Attempt(0) is said, so it is attempt 0", naming.Attempt(0), "0"},
		{"CallerKey", naming.CallerKey("evt-42"), "k-kdfo6u43zxiplof3rajyylplvs"},
		{"caller key", naming.CallerKey("evt-42"), "k-kdfo6u43zxiplof3rajyylplvs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.in.Attempt("extract")
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	u, err := naming.Identity{Strategy: naming.StrategyUnique}.Attempt("extract")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(u, "u-"))

	_, err = naming.Identity{Strategy: naming.StrategyCallerKey}.Attempt("extract")
	require.ErrorIs(t, err, naming.ErrMissingKey)
	_, err = naming.Identity{Strategy: 9}.Attempt("extract")
	require.EqualError(t, err, `invalid internal ID: strategy "Strategy(9)" must be strict, caller-key or unique`+hint)
}

const hint = "; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()"

// Every identity a user can write that does not say one attempt plainly is
// refused, naming what is wrong: a forgotten attempt is never attempt 0,
// and a key is never ignored.
func TestIdentityRefusesSilentAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   naming.Identity
		want string
	}{
		{"zero", naming.Identity{}, `strategy "" is not set: the request must say which attempt it is` + hint},
		{"key without strategy", naming.Identity{Key: "evt-43"}, `strategy "" is not set although Key is: set Strategy to StrategyCallerKey` + hint},
		{"number without strategy", naming.Identity{Number: 3}, `strategy "" is not set although Number is: set Strategy to StrategyStrict` + hint},
		{"strict with a key", naming.Identity{Strategy: naming.StrategyStrict, Number: 1, Key: "k"}, `idempotency key "k" is set with the strict strategy, which uses Number only` + hint},
		{"caller key with a number", naming.Identity{Strategy: naming.StrategyCallerKey, Number: 2, Key: "k"}, `number "2" is set with the caller-key strategy, which uses Key only` + hint},
		{"unique with a number", naming.Identity{Strategy: naming.StrategyUnique, Number: 2}, `number "2" is set with the unique strategy, which uses neither Number nor Key` + hint},
		{"unique with a key", naming.Identity{Strategy: naming.StrategyUnique, Key: "k"}, `idempotency key "k" is set with the unique strategy, which uses neither Number nor Key` + hint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.in.Attempt("extract")
			require.ErrorIs(t, err, naming.ErrInvalidID)
			require.EqualError(t, err, "invalid internal ID: "+tt.want)
		})
	}
}

func TestStrategyText(t *testing.T) {
	t.Parallel()
	for s, want := range map[naming.Strategy]string{naming.StrategyStrict: "strict", naming.StrategyCallerKey: "caller-key", naming.StrategyUnique: "unique"} {
		require.Equal(t, want, s.String())
		back, err := naming.ParseStrategy(want)
		require.NoError(t, err)
		require.Equal(t, s, back)
	}
	_, err := naming.ParseStrategy("loose")
	require.EqualError(t, err, `invalid internal ID: strategy "loose" must be strict, caller-key or unique`)
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
