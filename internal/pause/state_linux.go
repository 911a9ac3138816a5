package pause

import (
	"os"
	"strconv"
	"strings"
)

// Stopped reports whether the process pid is stopped (state "T" in
// /proc), as one that reached an armed point is: tests wait for it before
// they act on the paused process.
func Stopped(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+3 <= len(s) && s[i+2:i+3] == "T"
}
