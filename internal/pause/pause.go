// Package pause holds named pause points: places in the code where a test
// can stop a process at a precise moment (between a compactor's last look
// at its lease and its commit, say) and let another process act before it
// goes on. They are the one mechanism for such pauses: the tests of a
// package arm them in-process, and the chaos suite arms them in a child
// process through the environment.
//
// # In-process
//
// Arm returns a Gate: the first goroutine to reach the point blocks there
// (until the gate is released or its context ends), and Reached tells the
// test it arrived. Later arrivals pass.
//
// # In a child process
//
// A process started with CTDISPATCH_PAUSE=name[,name…] stops itself
// (SIGSTOP) at each named point it reaches, once, after writing
//
//	pause: stopped at NAME (pid PID); resume with SIGCONT
//
// on its standard error; the parent sends SIGCONT to let it go on. Where
// signals cannot stop a process (Windows) the point writes that it cannot
// pause and goes on.
//
// Points not armed cost one atomic load.
package pause

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// EnvVar names the environment variable that arms points in a process
// started with it: a comma-separated list of point names.
const EnvVar = "CTDISPATCH_PAUSE"

// The named points, listed here so that a test and the code it stops
// spell them alike.
const (
	// CompactCommit is in a compaction of one unit, after its last check
	// of its lease and before its commit record makes its outputs
	// visible.
	CompactCommit = "compact.commit"
)

// armed counts the points armed in-process, so that an unarmed Point
// costs one load.
var (
	armed atomic.Int32
	mu    sync.Mutex
	gates = map[string]*Gate{}
	// fromEnv holds the points the environment armed and not yet reached.
	fromEnv = parseEnv(os.Getenv(EnvVar))
)

func parseEnv(v string) map[string]bool {
	out := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name] = true
		}
	}
	if len(out) > 0 {
		armed.Add(1)
	}
	return out
}

// Gate is a point armed in-process.
type Gate struct {
	name    string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
	taken   bool
}

// Arm arms the point name in this process and returns its gate. Arming a
// point armed already is an error naming it: two tests sharing a point
// would release each other's pauses.
func Arm(name string) (*Gate, error) {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := gates[name]; ok {
		return nil, fmt.Errorf("pause point %q is armed already; disarm it first", name)
	}
	g := &Gate{name: name, reached: make(chan struct{}), release: make(chan struct{})}
	gates[name] = g
	armed.Add(1)
	return g, nil
}

// Reached is closed when a goroutine has reached the point and blocks
// there.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets the paused goroutine go on, and disarms the point: later
// arrivals pass. It may be called more than once, and before the point is
// reached.
func (g *Gate) Release() {
	g.once.Do(func() {
		mu.Lock()
		if gates[g.name] == g {
			delete(gates, g.name)
			armed.Add(-1)
		}
		mu.Unlock()
		close(g.release)
	})
}

// Point pauses here if the point name is armed: in-process until the
// gate is released or ctx ends, in a child process until SIGCONT.
func Point(ctx context.Context, name string) {
	if armed.Load() == 0 {
		return
	}
	mu.Lock()
	g := gates[name]
	first := g != nil && !g.taken
	if first {
		g.taken = true
	}
	env := fromEnv[name]
	delete(fromEnv, name)
	mu.Unlock()
	if first {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
		return
	}
	if env {
		stopSelf(name)
	}
}
