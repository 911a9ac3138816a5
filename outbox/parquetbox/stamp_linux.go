//go:build linux

package parquetbox

import (
	"os"
	"syscall"
)

// changeTime returns a stat's inode, change time and link count.
func changeTime(fi os.FileInfo) (ino uint64, ctime int64, links uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0, false
	}
	return st.Ino, st.Ctim.Nano(), uint64(st.Nlink), true
}

// holdOpen says that the segments of other processes a reader follows
// are held open between looks: on Linux a file held open can still be
// removed by the process that converts it.
const holdOpen = true
