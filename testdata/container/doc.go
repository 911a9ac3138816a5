// Package container holds the checks of ctdispatch's container image and
// of its installation with go install, run by scripts/container-test. It
// is a module of its own so that the main module's go.mod does not carry
// testcontainers-go, the Docker client and golang.org/x/mod for them.
package container
