// Package cli implements the ctdispatch command line. Each command is built
// by a function that takes an *Env (output writers, logger, environment), so
// the whole CLI runs in-process in tests exactly as it does from main.
package cli
