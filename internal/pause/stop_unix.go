//go:build unix

package pause

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// stopSelf stops the process until it receives SIGCONT. A SIGSTOP the
// process sends itself stops its threads a moment later, not at once: the
// calling goroutine could go on past the point (commit what the point is
// there to hold back) before the stop lands. So the caller also waits for
// the SIGCONT, which only comes once the process was stopped.
func stopSelf(name string) {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	fmt.Fprintf(os.Stderr, "pause: stopped at %s (pid %d); resume with SIGCONT\n", name, os.Getpid())
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
}
