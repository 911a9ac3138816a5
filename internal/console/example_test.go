package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/ctdispatch/ctdispatch/internal/console"
)

// A console over an outbox alone: the outbox pages answer, and the queue
// pages say what is missing.
func Example() {
	dir, err := os.MkdirTemp("", "outbox-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := console.New(context.Background(), console.Config{Outbox: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	for _, path := range []string{"/outbox", "/deliveries"} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /outbox 200
	// /deliveries 404
}
