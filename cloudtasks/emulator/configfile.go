package emulator

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
)

// configFile is the on-disk form of the parts of a Config that make sense
// in a file. Durations are Go duration strings ("100ms", "1h").
type configFile struct {
	NameReuseWindow  string      `yaml:"name_reuse_window"`
	QueueReuseWindow string      `yaml:"queue_reuse_window"`
	Queues           []queueFile `yaml:"queues"`
	Faults           struct {
		Seed  uint64     `yaml:"seed"`
		Rules []ruleFile `yaml:"rules"`
	} `yaml:"faults"`
}

type queueFile struct {
	Name                    string  `yaml:"name"`
	MaxDispatchesPerSecond  float64 `yaml:"max_dispatches_per_second"`
	MaxConcurrentDispatches int32   `yaml:"max_concurrent_dispatches"`
	MaxAttempts             int32   `yaml:"max_attempts"`
	MaxRetryDuration        string  `yaml:"max_retry_duration"`
	MinBackoff              string  `yaml:"min_backoff"`
	MaxBackoff              string  `yaml:"max_backoff"`
	MaxDoublings            int32   `yaml:"max_doublings"`
	Paused                  bool    `yaml:"paused"`
}

type ruleFile struct {
	Methods        []string `yaml:"methods"`
	Rate           float64  `yaml:"rate"`
	Code           string   `yaml:"code"`
	CommitThenFail bool     `yaml:"commit_then_fail"`
	Latency        string   `yaml:"latency"`
	PerRequest     bool     `yaml:"per_request"`
}

// ReadConfigFile reads queues, fault rules and reuse windows from a JSON or
// YAML document into cfg (queues are appended; other fields are set when
// present). Unknown keys are errors, so a misspelt setting is not silently
// ignored. Example (YAML):
//
//	name_reuse_window: 1h
//	queues:
//	  - name: projects/p/locations/l/queues/q
//	    max_dispatches_per_second: 10
//	    max_attempts: 5
//	    min_backoff: 1s
//	faults:
//	  seed: 1
//	  rules:
//	    - {methods: [CreateTask], rate: 0.1, code: UNAVAILABLE, commit_then_fail: true}
//	    - {methods: [BatchCreateTasks], rate: 0.05, code: UNAVAILABLE, per_request: true}
func ReadConfigFile(data []byte, cfg *Config) error {
	var f configFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("emulator config: %w", err)
	}
	var err error
	dur := func(field, v string) time.Duration {
		if v == "" || err != nil {
			return 0
		}
		d, perr := time.ParseDuration(v)
		if perr != nil {
			err = &ConfigError{Field: field, Value: v, Rule: `is not a duration such as "100ms" or "1h"`}
		}
		return d
	}
	if w := dur("name_reuse_window", f.NameReuseWindow); w != 0 {
		cfg.NameReuseWindow = w
	}
	if w := dur("queue_reuse_window", f.QueueReuseWindow); w != 0 {
		cfg.QueueReuseWindow = w
	}
	for i, q := range f.Queues {
		at := fmt.Sprintf("queues[%d].", i)
		cfg.Queues = append(cfg.Queues, QueueConfig{
			Name:                    q.Name,
			MaxDispatchesPerSecond:  q.MaxDispatchesPerSecond,
			MaxConcurrentDispatches: q.MaxConcurrentDispatches,
			MaxAttempts:             q.MaxAttempts,
			MaxRetryDuration:        dur(at+"max_retry_duration", q.MaxRetryDuration),
			MinBackoff:              dur(at+"min_backoff", q.MinBackoff),
			MaxBackoff:              dur(at+"max_backoff", q.MaxBackoff),
			MaxDoublings:            q.MaxDoublings,
			Paused:                  q.Paused,
		})
	}
	if len(f.Faults.Rules) > 0 || f.Faults.Seed != 0 {
		cfg.Faults.Seed = f.Faults.Seed
		for i, r := range f.Faults.Rules {
			code := codes.OK
			if r.Code != "" {
				var ok bool
				if code, ok = ParseCode(r.Code); !ok && err == nil {
					err = &ConfigError{Field: fmt.Sprintf("faults.rules[%d].code", i), Value: r.Code, Rule: "is not a gRPC code name such as UNAVAILABLE"}
				}
			}
			cfg.Faults.Rules = append(cfg.Faults.Rules, FaultRule{
				Methods: r.Methods, Rate: r.Rate, Code: code, CommitThenFail: r.CommitThenFail, PerRequest: r.PerRequest,
				Latency: dur(fmt.Sprintf("faults.rules[%d].latency", i), r.Latency),
			})
		}
	}
	return err
}

// ParseCode reads a gRPC code name in either spelling, "UNAVAILABLE" or
// "Unavailable".
func ParseCode(s string) (codes.Code, bool) {
	want := strings.ToLower(strings.ReplaceAll(s, "_", ""))
	if want == "cancelled" {
		return codes.Canceled, true
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.ToLower(c.String()) == want {
			return c, true
		}
	}
	return 0, false
}
