// Package riverbench measures ctdispatch's transactional dispatch beside
// river (github.com/riverqueue/river), the PostgreSQL job queue users
// reach for when they want a job inserted in their own transaction, on
// one throwaway PostgreSQL cluster (internal/testtools/pgtest).
//
// It is a module of its own so that the library does not depend on river
// (ADR 0002): only this module's go.mod names it, and `replace
// github.com/ctdispatch/ctdispatch => ../..` builds it against the
// working tree. The package has no API; its benchmarks and the test that
// keeps them working are in its _test.go files, and `make bench-river`
// runs the benchmarks. BENCHMARKS.md ("Beside river") has the figures.
package riverbench
