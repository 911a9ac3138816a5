package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ctdispatch/ctdispatch/internal/cli"
)

// Run is the whole command line; main passes os.Args[1:] and exits with
// the code it returns.
func ExampleRun() {
	code := cli.Run(context.Background(), []string{"id", "dispatch:run1:extract:1"}, cli.Env{Out: os.Stdout})
	fmt.Println("exit", code)
	code = cli.Run(context.Background(), []string{"frobnicate"}, cli.Env{Err: os.Stdout})
	fmt.Println("exit", code)
	// Output:
	// d_cxtoltqhbncw6nevn7hy53kqn6
	// exit 0
	// ctdispatch: unknown command "frobnicate" for "ctdispatch"
	// exit 2
}
