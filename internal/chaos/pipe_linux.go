package chaos

import (
	"io"
	"os"
	"syscall"
)

// fSetPipeSize is Linux's F_SETPIPE_SZ fcntl command.
const fSetPipeSize = 1031

// shrinkPipe makes the pipe behind r as small as Linux allows (a page), so
// that a child writing answers into it can run at most a few lines ahead of
// the parent that reads them: a kill keyed to the k-th answer then lands
// close to it, not a pipe's worth (64 KiB, some 300 answers) later when the
// parent is slow to be scheduled. Failing to shrink only weakens that.
func shrinkPipe(r io.Reader) {
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = sc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSize, 4096)
	})
}
