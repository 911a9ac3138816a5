package timers_test

import (
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/timers"
)

// The due time of the retry of a failed attempt, and what to schedule for
// a time beyond the 30 days Cloud Tasks holds a task.
func Example() {
	failed := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	due, _ := timers.Backoff{}.Due(failed, 3)
	fmt.Println(due)
	at, rearm := timers.Arm(failed.Add(60*24*time.Hour), failed)
	fmt.Println(at, rearm)
	// Output:
	// 2026-01-01 12:00:40 +0000 UTC
	// 2026-01-31 11:59:00 +0000 UTC true
}
