// Package pause holds the program's named pause points: places where the
// chaos suite and the CLI's tests stop a ctdispatch process at a precise
// moment (between a compactor's last look at its lease and its commit,
// say) and let another process act before it goes on.
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
//
// The library reads no environment: the point inside a compaction is
// parquetbox's CompactConfig.BeforeCommit hook, which ctdispatch compact
// sets to Point(CompactCommit) when Armed(CompactCommit). The chaos
// suite's e2e worker calls Point itself.
package pause

import (
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
	// visible (parquetbox's CompactConfig.BeforeCommit).
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

// Armed reports whether the environment armed the point name and some of
// its arrivals are still to stop.
func Armed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	return fromEnv[name] > 0
}

// Point stops the process here, until SIGCONT, if the environment armed
// the point name and this arrival is one of those it listed.
func Point(name string) {
	mu.Lock()
	stop := fromEnv[name] > 0
	if stop {
		fromEnv[name]--
	}
	mu.Unlock()
	if stop {
		stopSelf(name)
	}
}
