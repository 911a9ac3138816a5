//go:build unix

package pause

import (
	"fmt"
	"os"
	"syscall"
)

// stopSelf stops the process until it receives SIGCONT.
func stopSelf(name string) {
	fmt.Fprintf(os.Stderr, "pause: stopped at %s (pid %d); resume with SIGCONT\n", name, os.Getpid())
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}
