// Package pause holds named pause points: places in the code where a test
// can stop a process at a precise moment (between a compactor's last look
// at its lease and its commit, say) and let another process act before it
// goes on. They are the one mechanism for such pauses: a package's tests
// arm them in-process, and the chaos suite arms them in a child process
// through the environment.
//
// # In-process
//
// A Gate armed on a context pauses the first call of Point with that
// context (or one derived from it) and the gate's name, until the gate is
// released or the context ends; Reached tells the test it arrived. Other
// contexts, and later arrivals, pass: tests running in parallel do not
// stop each other.
//
// # In a child process
//
// A process started with CTDISPATCH_PAUSE=name[,name…] stops itself
// (SIGSTOP) at each named point the first time it reaches it (a name
// listed k times: the first k times), after writing
//
//	pause: stopped at NAME (pid PID); resume with SIGCONT
//
// on its standard error; the parent sends SIGCONT to let it go on. Where
// signals cannot stop a process (Windows) the point writes that it cannot
// pause and goes on.
package pause

import (
	"context"
	"os"
	"strings"
	"sync"
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
	// E2EWorkerBeforeCommit is in the chaos suite's e2e worker, after
	// the handler applied its effect in the inbox's transaction and
	// before the transaction commits.
	E2EWorkerBeforeCommit = "e2e.worker.before_commit"
	// E2EWorkerAfterCommit is in the chaos suite's e2e worker, after the
	// inbox committed the effect and the key's done mark and before the
	// worker answers.
	E2EWorkerAfterCommit = "e2e.worker.after_commit"
)

// fromEnv holds how many more arrivals at each point the environment
// armed.
var (
	mu      sync.Mutex
	fromEnv = parseEnv(os.Getenv(EnvVar))
)

func parseEnv(v string) map[string]int {
	out := map[string]int{}
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name]++
		}
	}
	return out
}

// Gate is a point armed in-process, on a context.
type Gate struct {
	name    string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	taken   bool
}

// NewGate returns a gate for the point name; arm it with Arm.
func NewGate(name string) *Gate {
	return &Gate{name: name, reached: make(chan struct{}), release: make(chan struct{})}
}

type gateKey struct{ name string }

// Arm returns a context under which the gate's point pauses.
func Arm(ctx context.Context, g *Gate) context.Context {
	return context.WithValue(ctx, gateKey{g.name}, g)
}

// Reached is closed when a call has reached the point and blocks there.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets the paused call go on; later arrivals pass. It may be
// called more than once, and before the point is reached.
func (g *Gate) Release() { g.once.Do(func() { close(g.release) }) }

// Point pauses here if the point name is armed: on ctx, until its gate is
// released or ctx ends; through the environment, until SIGCONT.
func Point(ctx context.Context, name string) {
	if g, ok := ctx.Value(gateKey{name}).(*Gate); ok {
		g.mu.Lock()
		first := !g.taken
		g.taken = true
		g.mu.Unlock()
		if first {
			close(g.reached)
			select {
			case <-g.release:
			case <-ctx.Done():
			}
			return
		}
	}
	mu.Lock()
	env := fromEnv[name] > 0
	if env {
		fromEnv[name]--
	}
	mu.Unlock()
	if env {
		stopSelf(name)
	}
}
