package emuconfig_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/emuconfig"
)

func TestRead(t *testing.T) {
	t.Parallel()
	want := emulator.Config{
		NameReuseWindow: time.Hour,
		Queues: []emulator.QueueConfig{{
			Name: "projects/p/locations/l/queues/q", MaxDispatchesPerSecond: 10, MaxConcurrentDispatches: 5,
			MaxAttempts: -1, MaxRetryDuration: time.Hour, MinBackoff: time.Second, MaxBackoff: time.Minute, MaxDoublings: 3, Paused: true,
		}},
		Faults: emulator.Faults{Seed: 9, Rules: []emulator.FaultRule{
			{Methods: []string{"CreateTask"}, Rate: 0.1, Code: codes.Unavailable, CommitThenFail: true},
			{Rate: 1, Latency: 5 * time.Millisecond},
			{Methods: []string{"BatchCreateTasks"}, Rate: 0.2, Code: codes.Unavailable, PerRequest: true},
		}},
		DeliveryFaults: emulator.DeliveryFaults{Seed: 3,
			Rates: map[emulator.DeliveryFault]float64{emulator.FaultLoseReply: 0.05, emulator.FaultDeliverTwice: 0.1},
			Tasks: map[string]emulator.DeliveryFault{"dispatch:run1:extract:1": emulator.FaultWithhold, "d_abc": emulator.FaultReset},
			Delay: 200 * time.Millisecond},
	}
	yamlDoc := `
name_reuse_window: 1h
queues:
  - name: projects/p/locations/l/queues/q
    max_dispatches_per_second: 10
    max_concurrent_dispatches: 5
    max_attempts: -1
    max_retry_duration: 1h
    min_backoff: 1s
    max_backoff: 1m
    max_doublings: 3
    paused: true
faults:
  seed: 9
  rules:
    - {methods: [CreateTask], rate: 0.1, code: UNAVAILABLE, commit_then_fail: true}
    - {rate: 1, latency: 5ms}
    - {methods: [BatchCreateTasks], rate: 0.2, code: UNAVAILABLE, per_request: true}
delivery_faults:
  seed: 3
  rates: {lose_reply: 0.05, deliver_twice: 0.1}
  tasks: {"dispatch:run1:extract:1": withhold, d_abc: reset}
  delay: 200ms
`
	jsonDoc := `{"name_reuse_window": "1h",
  "queues": [{"name": "projects/p/locations/l/queues/q", "max_dispatches_per_second": 10,
    "max_concurrent_dispatches": 5, "max_attempts": -1, "max_retry_duration": "1h",
    "min_backoff": "1s", "max_backoff": "1m", "max_doublings": 3, "paused": true}],
  "faults": {"seed": 9, "rules": [
    {"methods": ["CreateTask"], "rate": 0.1, "code": "Unavailable", "commit_then_fail": true},
    {"rate": 1, "latency": "5ms"},
    {"methods": ["BatchCreateTasks"], "rate": 0.2, "code": "UNAVAILABLE", "per_request": true}]},
  "delivery_faults": {"seed": 3, "rates": {"lose_reply": 0.05, "deliver_twice": 0.1},
    "tasks": {"dispatch:run1:extract:1": "withhold", "d_abc": "reset"}, "delay": "200ms"}}`
	for name, doc := range map[string]string{"yaml": yamlDoc, "json": jsonDoc} {
		t.Run(name, func(t *testing.T) {
			var cfg emulator.Config
			require.NoError(t, emuconfig.Read([]byte(doc), &cfg))
			require.Equal(t, want, cfg)
		})
	}
}

// Time budget for the tests below: milliseconds.

func TestParseCode(t *testing.T) {
	t.Parallel()
	// Both documented spellings of every code: the status name and Go's.
	accepted := []struct {
		status, goName string
		want           codes.Code
	}{
		{"OK", "OK", codes.OK},
		{"CANCELLED", "Canceled", codes.Canceled},
		{"UNKNOWN", "Unknown", codes.Unknown},
		{"INVALID_ARGUMENT", "InvalidArgument", codes.InvalidArgument},
		{"DEADLINE_EXCEEDED", "DeadlineExceeded", codes.DeadlineExceeded},
		{"NOT_FOUND", "NotFound", codes.NotFound},
		{"ALREADY_EXISTS", "AlreadyExists", codes.AlreadyExists},
		{"PERMISSION_DENIED", "PermissionDenied", codes.PermissionDenied},
		{"RESOURCE_EXHAUSTED", "ResourceExhausted", codes.ResourceExhausted},
		{"FAILED_PRECONDITION", "FailedPrecondition", codes.FailedPrecondition},
		{"ABORTED", "Aborted", codes.Aborted},
		{"OUT_OF_RANGE", "OutOfRange", codes.OutOfRange},
		{"UNIMPLEMENTED", "Unimplemented", codes.Unimplemented},
		{"INTERNAL", "Internal", codes.Internal},
		{"UNAVAILABLE", "Unavailable", codes.Unavailable},
		{"DATA_LOSS", "DataLoss", codes.DataLoss},
		{"UNAUTHENTICATED", "Unauthenticated", codes.Unauthenticated},
	}
	require.Len(t, accepted, 17, "every code")
	for _, tc := range accepted {
		for _, s := range []string{tc.status, tc.goName} {
			got, err := emuconfig.ParseCode(s)
			require.NoError(t, err, s)
			require.Equal(t, tc.want, got, s)
		}
	}
	// Numbers, other cases and mixed spellings are not names of ours.
	for _, s := range []string{"14", "0", "", "unavailable", "Unavailable ", "Cancelled", "CANCELED", "Ok", "Deadline_Exceeded", "DEADLINE_exceeded", "deadlineExceeded", "NOPE"} {
		_, err := emuconfig.ParseCode(s)
		require.EqualError(t, err, fmt.Sprintf("%q ", s)+codeRule, s)
	}
}

// codeRule is ParseCode's rule, as its errors end.
const codeRule = `is not a gRPC code name; allowed: the status names (OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED) or Go's spelling of them (Unavailable, DeadlineExceeded, Canceled)`

func TestReadErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, want string
	}{
		{"a duration that is not one", "queues:\n  - name: projects/p/locations/l/queues/q\n    min_backoff: soon\n",
			"emulator config: yaml: unmarshal errors:\n  queues[0].min_backoff: line 3: cannot unmarshal !!str `soon` into time.Duration; want a Go duration such as \"100ms\" or \"1h\""},
		{"a duration without a unit", "name_reuse_window: 5\n",
			"emulator config: yaml: unmarshal errors:\n  name_reuse_window: line 1: cannot unmarshal !!int `5` into time.Duration; want a Go duration such as \"100ms\" or \"1h\""},
		{"a misspelt key", "queues:\n  - {name: projects/p/locations/l/queues/q, max_atempts: 3}\n",
			"emulator config: yaml: unmarshal errors:\n  queues[0].max_atempts: line 2: field max_atempts not found in type emulator.QueueConfig"},
		{"a code that is not a name", "faults:\n  rules:\n    - {rate: 1, code: UNAVAILABLE}\n    - {rate: 1, code: Nope}\n",
			"emulator config: yaml: unmarshal errors:\n  faults.rules[1].code: line 4: \"Nope\" " + codeRule},
		{"a code given as a number", `{"faults": {"rules": [{"rate": 1, "code": 14}]}}`,
			"emulator config: yaml: unmarshal errors:\n  faults.rules[0].code: line 1: \"14\" " + codeRule},
		{"a latency in a rule", "faults:\n  rules:\n    - rate: 1\n      latency: 2\n",
			"emulator config: yaml: unmarshal errors:\n  faults.rules[0].latency: line 4: cannot unmarshal !!int `2` into time.Duration; want a Go duration such as \"100ms\" or \"1h\""},
		{"not YAML", "queues: [", "emulator config: yaml: line 1: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cfg emulator.Config
			require.EqualError(t, emuconfig.Read([]byte(tt.doc), &cfg), tt.want)
		})
	}
}
