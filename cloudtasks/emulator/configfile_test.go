package emulator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

func TestReadConfigFile(t *testing.T) {
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
`
	jsonDoc := `{"name_reuse_window": "1h",
  "queues": [{"name": "projects/p/locations/l/queues/q", "max_dispatches_per_second": 10,
    "max_concurrent_dispatches": 5, "max_attempts": -1, "max_retry_duration": "1h",
    "min_backoff": "1s", "max_backoff": "1m", "max_doublings": 3, "paused": true}],
  "faults": {"seed": 9, "rules": [
    {"methods": ["CreateTask"], "rate": 0.1, "code": "Unavailable", "commit_then_fail": true},
    {"rate": 1, "latency": "5ms"},
    {"methods": ["BatchCreateTasks"], "rate": 0.2, "code": "UNAVAILABLE", "per_request": true}]}}`
	for name, doc := range map[string]string{"yaml": yamlDoc, "json": jsonDoc} {
		t.Run(name, func(t *testing.T) {
			var cfg emulator.Config
			require.NoError(t, emulator.ReadConfigFile([]byte(doc), &cfg))
			require.Equal(t, want, cfg)
		})
	}
}
