//go:build !unix

package pause

import (
	"fmt"
	"os"
)

// stopSelf cannot stop a process without signals; it says so.
func stopSelf(name string) {
	fmt.Fprintf(os.Stderr, "pause: cannot stop at %s on this system; going on\n", name)
}
