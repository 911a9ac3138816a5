// Command fakegcs runs fake-gcs-server (github.com/fsouza/fake-gcs-server)
// on loopback, as its own process, for tests that point
// STORAGE_EMULATOR_HOST at a Cloud Storage emulator:
//
//	go run ./internal/testtools/fakegcs -bucket outbox-test
//
// It prints "STORAGE_EMULATOR_HOST=127.0.0.1:PORT" on stdout once it
// serves, with the port the system chose (or -port), and serves until it
// is interrupted or its standard input closes, so a test that dies does not
// leave it behind.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func main() {
	var buckets []string
	flag.Func("bucket", "create this bucket at start (repeatable)", func(s string) error {
		buckets = append(buckets, s)
		return nil
	})
	port := flag.Int("port", 0, "loopback port to listen on (0: any free port)")
	flag.Parse()
	if err := run(buckets, *port); err != nil {
		fmt.Fprintf(os.Stderr, "fakegcs: %v\n", err)
		os.Exit(1)
	}
}

func run(buckets []string, port int) error {
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return err
		}
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	// PublicHost makes the server answer downloads addressed to it by
	// host:port.
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: "127.0.0.1", Port: uint16(port), PublicHost: host, NoListener: false,
	})
	if err != nil {
		return err
	}
	defer srv.Stop()
	for _, b := range buckets {
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: strings.TrimSpace(b)})
	}
	fmt.Printf("STORAGE_EMULATOR_HOST=%s\n", host)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	}
	return nil
}
