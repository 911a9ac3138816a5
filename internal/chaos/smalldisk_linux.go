package chaos

import (
	"fmt"
	"syscall"
)

// smallDisk is a tmpfs the suite mounted.
type smallDisk struct{ dir string }

// mountSmallDisk mounts a tmpfs of size bytes on dir. Without the
// privilege to mount (not root, or a container without CAP_SYS_ADMIN) it
// returns an error matching errNoSmallDisk.
func mountSmallDisk(dir string, size int64) (*smallDisk, error) {
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
	switch {
	case err == syscall.EPERM || err == syscall.EACCES:
		return nil, fmt.Errorf("%w: mount tmpfs on %s: %v (run the suite as root to include it)", errNoSmallDisk, dir, err)
	case err != nil:
		return nil, fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return &smallDisk{dir: dir}, nil
}

// grow gives the tmpfs size bytes, keeping its files.
func (d *smallDisk) grow(size int64) error {
	return syscall.Mount("tmpfs", d.dir, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", size))
}

// unmount removes the tmpfs and everything on it; a busy mount is detached
// lazily.
func (d *smallDisk) unmount() {
	if err := syscall.Unmount(d.dir, 0); err != nil {
		syscall.Unmount(d.dir, syscall.MNT_DETACH)
	}
}

// freeBytes is the space left on the filesystem holding dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
