//go:build !unix

package bench

import "time"

// cpuTime returns 0: the process's CPU time is read from rusage, which
// this system lacks, so CPU per call reads 0.
func cpuTime() time.Duration { return 0 }
