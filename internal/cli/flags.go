package cli

import (
	"strconv"
	"time"
)

// parseTimeFlag reads a time given on the command line as RFC 3339
// ("2024-01-15T17:40:00Z") or as whole seconds since the Unix epoch.
func parseTimeFlag(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, usagef("%s is required (RFC 3339 or seconds since the epoch)", flag)
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(secs, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef("%s %q is not a time; use RFC 3339 (2024-01-15T17:40:00Z) or seconds since the epoch", flag, v)
	}
	return t, nil
}
