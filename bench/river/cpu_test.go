package riverbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 for user space on every architecture Go
// supports here.
const clockTick = 10 * time.Millisecond

// clientCPU returns the user and system CPU time this process has used
// (getrusage), benchmark and emulator and both clients alike: a line runs
// one side at a time, so a phase's difference is that side's.
func clientCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// server reads the CPU time of one PostgreSQL cluster's processes.
type server struct{ postmaster int }

// serverOf finds the postmaster of the cluster pool is connected to,
// from the postmaster.pid file in its data directory.
func serverOf(tb testing.TB, pool *pgxpool.Pool) server {
	tb.Helper()
	var dir string
	require.NoError(tb, pool.QueryRow(context.Background(), "SHOW data_directory").Scan(&dir))
	raw, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	require.NoError(tb, err)
	pid, err := strconv.Atoi(strings.SplitN(string(raw), "\n", 2)[0])
	require.NoError(tb, err)
	return server{postmaster: pid}
}

// cpu returns the user and system CPU time of the postmaster, of its
// children that have exited (which it has waited for: cutime, cstime),
// and of its children alive now (backends, WAL writer, checkpointer,
// autovacuum), from /proc/<pid>/stat, to the clock tick (10 ms).
func (s server) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(tb, err)
	var ticks int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // a process that ended since ReadDir
		}
		switch {
		case pid == s.postmaster:
			ticks += st.utime + st.stime + st.cutime + st.cstime
		case st.ppid == int64(s.postmaster):
			ticks += st.utime + st.stime
		}
	}
	return time.Duration(ticks) * clockTick
}

// stat is what cpu needs of /proc/<pid>/stat.
type stat struct{ ppid, utime, stime, cutime, cstime int64 }

func readStat(pid int) (stat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after it start with the state, field 3.
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, s)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %d fields after the name, want 15 or more", pid, len(f))
	}
	field := func(n int) int64 { // n counts from 1, as proc(5) does
		v, _ := strconv.ParseInt(f[n-3], 10, 64)
		return v
	}
	return stat{ppid: field(4), utime: field(14), stime: field(15), cutime: field(16), cstime: field(17)}, nil
}
