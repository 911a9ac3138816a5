// Package hostguard decides whether a request's Host header names a
// server of this process. A page of another site can make a browser send
// requests to a server on the user's machine by rebinding its own name to
// 127.0.0.1 (DNS rebinding); the one thing it cannot choose is the Host
// header, which carries the site's name. The console and the emulator's
// HTTP server answer only the hosts a Hosts admits.
package hostguard

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Hosts is the set of Host header values a server answers to.
type Hosts struct {
	hostports map[string]bool // host:port, lower case
	anyPort   map[string]bool // host names allowed with any port or none
}

// New returns the hosts of a server bound to bound: the bound address
// itself; when bound is a loopback or all-interfaces address, localhost,
// 127.0.0.1 and [::1] with the bound port; and every entry of allow
// ("name" for any port or none, "name:port" for that port only). Entries
// are assumed checked with EntryRule.
func New(bound net.Addr, allow []string) *Hosts {
	h := &Hosts{hostports: map[string]bool{}, anyPort: map[string]bool{}}
	if tcp, ok := bound.(*net.TCPAddr); ok {
		port := strconv.Itoa(tcp.Port)
		if !tcp.IP.IsUnspecified() && tcp.IP != nil {
			h.allow(net.JoinHostPort(tcp.IP.String(), port), port)
		}
		if tcp.IP == nil || tcp.IP.IsLoopback() || tcp.IP.IsUnspecified() {
			for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
				h.allow(net.JoinHostPort(name, port), port)
			}
		}
	}
	for _, a := range allow {
		if _, _, err := net.SplitHostPort(a); err == nil {
			h.allow(a, "")
		} else {
			h.anyPort[strings.ToLower(strings.Trim(a, "[]"))] = true
		}
	}
	return h
}

// allow admits hostport, and the same host without a port when the port
// is 80, the one a browser leaves out of Host for http.
func (h *Hosts) allow(hostport, port string) {
	hostport = strings.ToLower(hostport)
	h.hostports[hostport] = true
	if port == "80" {
		host, _, _ := net.SplitHostPort(hostport)
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		h.hostports[host] = true
	}
}

// Allowed reports whether a request whose Host header is hostHeader is
// addressed to the server. Names compare without regard to case.
func (h *Hosts) Allowed(hostHeader string) bool {
	hh := strings.ToLower(hostHeader)
	if h.hostports[hh] {
		return true
	}
	name := hh
	if host, _, err := net.SplitHostPort(hh); err == nil {
		name = host
	}
	return h.anyPort[strings.Trim(name, "[]")]
}

// EntryRule checks one entry of an allow list: a host name or IP,
// optionally with :PORT (1 to 65535), and nothing else. It returns "" for
// a good entry, and otherwise what is wrong and what is allowed, to follow
// the quoted entry in an error; example is a name it offers as one that
// is allowed.
func EntryRule(entry, example string) string {
	notHost := "is not a host name; allowed: a name such as " + example + " or an IP, optionally with :PORT, without a scheme or path"
	if strings.ContainsAny(entry, "/@?#*, ") {
		return notHost
	}
	host := entry
	if hh, port, err := net.SplitHostPort(entry); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("has port %q; allowed: a name, or name:PORT with PORT from 1 to 65535", port)
		}
		host = hh
	}
	if strings.Trim(host, "[]") == "" {
		return notHost
	}
	return ""
}
