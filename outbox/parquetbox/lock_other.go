//go:build !unix

package parquetbox

import "os"

// tryLock opens the lock file; without flock every other processor is
// assumed alive, so dead processors' logs are only replayed by their own
// processor UUID.
func tryLock(path string, create bool) (*os.File, bool, error) {
	if !create {
		return nil, true, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, filePerm)
	return f, false, err
}
