// Package emuconfig reads the configuration file of ctdispatch emulator
// (--config): queues, fault plans and reuse windows, in JSON or YAML,
// into an emulator.Config, with errors that name the setting, its line
// and its value.
package emuconfig

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// configFile is the part of an emulator.Config a file may set, decoded
// straight into the Config's own types (QueueConfig, FaultRule): durations
// are Go duration strings ("100ms", "1h"), as yaml.v3 decodes a
// time.Duration.
type configFile struct {
	NameReuseWindow  time.Duration          `yaml:"name_reuse_window"`
	QueueReuseWindow time.Duration          `yaml:"queue_reuse_window"`
	Queues           []emulator.QueueConfig `yaml:"queues"`
	Faults           *struct {
		Seed  uint64     `yaml:"seed"`
		Rules []ruleFile `yaml:"rules"`
	} `yaml:"faults"`
	DeliveryFaults *emulator.DeliveryFaults `yaml:"delivery_faults"`
}

// ruleFile is an emulator.FaultRule with its code read by name:
// codes.Code is a number to yaml, and a file names codes.
type ruleFile struct {
	emulator.FaultRule `yaml:",inline"`
	Code               codeName `yaml:"code"`
}

// codeName is a codes.Code that a file spells as ParseCode reads it.
type codeName codes.Code

// UnmarshalYAML reads a code name; its errors are a *yaml.TypeError, so
// the decoder reports them with the others, by line.
func (c *codeName) UnmarshalYAML(n *yaml.Node) error {
	code, err := ParseCode(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q %s", n.Line, n.Value, codeRule)}}
	}
	*c = codeName(code)
	return nil
}

// Read reads queues, fault rules, delivery faults and reuse windows from a JSON or
// YAML document into cfg (queues are appended; other fields are set when
// present). Unknown keys are errors, so a misspelt setting is not silently
// ignored; an error names the setting (queues[0].min_backoff), its line and
// value. Example (YAML):
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
//	delivery_faults:
//	  seed: 1
//	  rates: {lose_reply: 0.05, deliver_twice: 0.05}
//	  tasks: {"dispatch:run1:extract:1": withhold}
//	  delay: 200ms
//
// A code is a name as ParseCode reads it (UNAVAILABLE or Unavailable),
// never a number.
func Read(data []byte, cfg *emulator.Config) error {
	var f configFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		var root yaml.Node
		if yaml.Unmarshal(data, &root) == nil {
			err = nameSettings(&root, err)
		}
		return fmt.Errorf("emulator config: %w", err)
	}
	if f.NameReuseWindow != 0 {
		cfg.NameReuseWindow = f.NameReuseWindow
	}
	if f.QueueReuseWindow != 0 {
		cfg.QueueReuseWindow = f.QueueReuseWindow
	}
	cfg.Queues = append(cfg.Queues, f.Queues...)
	if f.DeliveryFaults != nil {
		cfg.DeliveryFaults = *f.DeliveryFaults
	}
	if f.Faults != nil && (len(f.Faults.Rules) > 0 || f.Faults.Seed != 0) {
		cfg.Faults.Seed = f.Faults.Seed
		for _, r := range f.Faults.Rules {
			rule := r.FaultRule
			rule.Code = codes.Code(r.Code)
			cfg.Faults.Rules = append(cfg.Faults.Rules, rule)
		}
	}
	return nil
}

// codeRule says which code names ParseCode accepts.
const codeRule = `is not a gRPC code name; allowed: the status names (OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED) or Go's spelling of them (Unavailable, DeadlineExceeded, Canceled)`

// ParseCode reads a gRPC status code by name, in either documented
// spelling: the status name ("UNAVAILABLE", "DEADLINE_EXCEEDED",
// "CANCELLED"), as codes.Code.UnmarshalJSON reads it, or Go's
// codes.Code.String ("Unavailable", "DeadlineExceeded", "Canceled"),
// turned into the first. Numbers, which UnmarshalJSON would also take, are
// refused: a fault plan names its codes.
func ParseCode(s string) (codes.Code, error) {
	name := s
	goSpelling := strings.ToUpper(s) != s
	if goSpelling {
		name = upperSnake(s)
		if name == "CANCELED" {
			name = "CANCELLED" // Go's one spelling that differs beyond case
		}
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(name))); err != nil || (goSpelling && c.String() != s) {
		return 0, fmt.Errorf("%q %s", s, codeRule)
	}
	return c, nil
}

// upperSnake turns Go's spelling of a code name into the status name:
// "DeadlineExceeded" → "DEADLINE_EXCEEDED".
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// decodeErrorLine matches one of yaml's decoding errors: its line and the
// value or key it quotes.
var decodeErrorLine = regexp.MustCompile("^line (\\d+): (?:.*`([^`]*)`|field (\\S+) not found|\"([^\"]*)\")")

// nameSettings prefixes each of a *yaml.TypeError's errors with the
// setting it is about (queues[0].min_backoff), found by its line and
// quoted text in root, the document's node tree.
func nameSettings(root *yaml.Node, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	type spot struct{ path, text string }
	byLine := map[int][]spot{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := strings.TrimPrefix(path+"."+k.Value, ".")
				byLine[k.Line] = append(byLine[k.Line], spot{p, k.Value})
				if v.Kind == yaml.ScalarNode {
					byLine[v.Line] = append(byLine[v.Line], spot{p, v.Value})
				}
				walk(v, p)
			}
		}
	}
	walk(root, "")
	out := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		if strings.HasSuffix(e, "into time.Duration") {
			e += `; want a Go duration such as "100ms" or "1h"`
		}
		out[i] = e
		m := decodeErrorLine.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		text := m[2] + m[3] + m[4]
		for _, s := range byLine[line] {
			if s.text == text {
				out[i] = s.path + ": " + e
				break
			}
		}
	}
	return &yaml.TypeError{Errors: out}
}
