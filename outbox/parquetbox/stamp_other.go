//go:build !linux

package parquetbox

import "os"

// changeTime reports no change time: stamps are not trusted here, and
// every look at the logs and the tables lists them again.
func changeTime(os.FileInfo) (ino uint64, ctime int64, links uint64, ok bool) {
	return 0, 0, 0, false
}

// holdOpen says that segments are opened on each look: elsewhere a file
// held open may keep its writer from removing it.
const holdOpen = false
