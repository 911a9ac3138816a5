//go:build unix

package parquetbox

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive advisory lock on path without waiting. It
// reports held=false when another live process holds it. With create unset,
// a missing lock file yields (nil, false, nil): nobody holds it.
func tryLock(path string, create bool) (f *os.File, held bool, err error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err = os.OpenFile(path, flags, filePerm)
	if err != nil {
		if !create && errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, err
	}
	return f, false, nil
}
