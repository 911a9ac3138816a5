package console

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/ctdispatch/ctdispatch/internal/hostguard"
)

// Statuses the host guard answers with, before anything is rendered.
const (
	// StatusWrongHost answers a request whose Host header names neither
	// the address the console is bound to, a loopback name with its port
	// (for a loopback or all-interfaces bind), nor an allowed host: 421
	// Misdirected Request, "the request was directed at a server that is
	// not able to produce a response" for that authority. This is what
	// stops a DNS-rebinding page.
	StatusWrongHost = http.StatusMisdirectedRequest
	// StatusCrossSite answers an action (any method other than GET, HEAD
	// and OPTIONS) that a browser says comes from another origin
	// (Sec-Fetch-Site other than same-origin or none, or an Origin whose
	// host is not the request's Host): 403 Forbidden.
	StatusCrossSite = http.StatusForbidden
)

// ErrEveryInterface is returned by Listen for an address on every network
// interface (0.0.0.0, [::], or an empty host) when no host is allowed by
// name: any name that resolves to the machine would reach such a console.
var ErrEveryInterface = errors.New("console: an address on every network interface needs the host names the console is reached by")

// Guard wraps h so that it answers only requests addressed to a console
// bound to bound, and only same-origin actions:
//
//   - The Host header must be the bound address itself, or, when bound is
//     a loopback or all-interfaces address, localhost, 127.0.0.1 or [::1]
//     with the bound port, or a name in allowHosts ("name" for any port
//     or none, "name:port" for that port only). Anything else gets
//     StatusWrongHost. Names compare without regard to case.
//   - A method other than GET, HEAD and OPTIONS must pass
//     http.CrossOriginProtection (Sec-Fetch-Site same-origin or none, or
//     an Origin matching the Host, or neither header: not a browser), or
//     gets StatusCrossSite.
//
// Every console server (`ctdispatch console`, `emulator --console-addr`,
// `demo --keep`) serves through it; see Server.Serve.
func Guard(h http.Handler, bound net.Addr, allowHosts []string) http.Handler {
	return &guard{next: h, hosts: hostguard.New(bound, allowHosts), cross: http.NewCrossOriginProtection()}
}

type guard struct {
	next  http.Handler
	hosts *hostguard.Hosts
	cross *http.CrossOriginProtection
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hosts.Allowed(r.Host) {
		refuse(w, StatusWrongHost, fmt.Sprintf("console: Host %q is not an address this console answers to; a page of another site cannot read it. Reach it at the address it printed, or allow this name when starting it (--allow-host, or --console-allow-host for emulator and demo).", r.Host))
		return
	}
	if err := g.cross.Check(r); err != nil {
		refuse(w, StatusCrossSite, "console: refused a cross-origin "+r.Method+" request: actions are accepted only from the console's own pages.")
		return
	}
	g.next.ServeHTTP(w, r)
}

// refuse answers with a plain-text message and nothing from the console.
func refuse(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// validAllowHost checks one Config.AllowHosts entry: a host name or IP,
// optionally with a port, and nothing else.
func validAllowHost(h string) error {
	if rule := hostguard.EntryRule(h, "console.internal"); rule != "" {
		return fmt.Errorf("console: AllowHosts entry %q %s", h, rule)
	}
	return nil
}
