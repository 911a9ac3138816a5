// Package user is a program of a ctdispatch user, in a module of its own
// outside the repository's module: its tests use only the public
// packages, written the way the README and the package docs say, and CI
// runs them (scripts/readme-go).
package user
