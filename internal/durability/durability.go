// Package durability maps the durability modes the CLI, the benchmarks
// and the chaos suite name (overlapped, strict, interval, memory) to the
// outbox and the dispatcher setting that make each: the dispatcher knows
// two modes (cloudtasks.Durability), and the outbox implementation says
// how durable a kept record is (parquetbox's Durable or Interval, or
// outbox.Memory).
package durability

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Mode is a durability mode as the CLI names it.
type Mode string

// The modes, in the order the docs present them.
const (
	Overlapped Mode = "overlapped"
	Strict     Mode = "strict"
	Interval   Mode = "interval"
	Memory     Mode = "memory"
)

// Modes returns every mode, in the order the docs present them.
func Modes() [4]Mode { return [4]Mode{Overlapped, Strict, Interval, Memory} }

// Parse reads a mode name.
func Parse(s string) (Mode, error) {
	for _, m := range Modes() {
		if s == string(m) {
			return m, nil
		}
	}
	names := make([]string, 0, 4)
	for _, m := range Modes() {
		names = append(names, string(m))
	}
	return "", fmt.Errorf("durability %q is not a mode; allowed: %s", s, strings.Join(names, ", "))
}

// Dispatcher returns the dispatcher setting of m.
func (m Mode) Dispatcher() cloudtasks.Durability {
	if m == Strict {
		return cloudtasks.DurabilityStrict
	}
	return cloudtasks.DurabilityOverlapped
}

// Open opens the outbox m needs: an outbox.Memory on opts.Clock for
// memory, else a parquetbox outbox with opts and the log durability of m.
// The returned function closes it.
func Open(ctx context.Context, m Mode, opts parquetbox.Config) (outbox.Outbox, func() error, error) {
	if m == Memory {
		return outbox.NewMemory(opts.Clock), func() error { return nil }, nil
	}
	opts.Durability = parquetbox.Durable
	if m == Interval {
		opts.Durability = parquetbox.Interval
	}
	o, err := parquetbox.Open(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	return o, o.Close, nil
}

// Dispatcher is a dispatcher together with the outbox opened for it, for
// the commands and suites that open both at once. Close closes both.
type Dispatcher struct {
	*cloudtasks.Dispatcher
	closeBox func() error
}

// OpenDispatcher opens the outbox of mode m at opts (as Open does) and a
// dispatcher over it with cfg, whose Durability it sets from m.
func OpenDispatcher(ctx context.Context, m Mode, opts parquetbox.Config, cfg cloudtasks.Config) (*Dispatcher, error) {
	box, closeBox, err := Open(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	cfg.Durability = m.Dispatcher()
	d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
	if err != nil {
		return nil, errors.Join(err, closeBox())
	}
	return &Dispatcher{Dispatcher: d, closeBox: closeBox}, nil
}

// Close closes the dispatcher (flushing the outbox), then the outbox.
func (d *Dispatcher) Close(ctx context.Context) error {
	return errors.Join(d.Dispatcher.Close(ctx), d.closeBox())
}
