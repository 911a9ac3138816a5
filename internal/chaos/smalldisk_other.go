//go:build !linux

package chaos

import "fmt"

// smallDisk is a tmpfs the suite mounted; only Linux has one to offer.
type smallDisk struct{}

func mountSmallDisk(dir string, _ int64) (*smallDisk, error) {
	return nil, fmt.Errorf("%w: tmpfs mounts are a Linux feature", errNoSmallDisk)
}

func (*smallDisk) grow(int64) error { return errNoSmallDisk }

func (*smallDisk) unmount() {}

func freeBytes(string) (int64, error) { return 0, errNoSmallDisk }
