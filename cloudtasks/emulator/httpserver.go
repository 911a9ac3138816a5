package emulator

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/ctdispatch/ctdispatch/internal/hostguard"
)

// httpHandler is the emulator's HTTP server: the OIDC issuer's keys and
// discovery document, and the inspection, answered only for the hosts the
// server is reached by.
func (s *Server) httpHandler() http.Handler {
	return s.guardHosts(s.withInspection(s.oidc.Handler()))
}

// guardHosts answers 421 Misdirected Request to a request whose Host is
// none of the server's: its address as it listens and as it advertises
// it (HTTPAddr, which the console is told), loopback names with its port,
// PublicURL's host, and Config.AllowHosts. It reuses the console's host
// check, for the same reason: a page that rebinds its own name to the
// emulator's address must not read the inspection, which shows the
// deliveries' URLs and headers.
func (s *Server) guardHosts(next http.Handler) http.Handler {
	allow := append(slices.Clone(s.cfg.AllowHosts), s.HTTPAddr())
	if u, err := url.Parse(s.public); err == nil {
		allow = append(allow, u.Host)
	}
	hosts := hostguard.New(s.hlis.Addr(), allow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts.Allowed(r.Host) {
			w.Header().Set("X-Content-Type-Options", "nosniff")
			http.Error(w, fmt.Sprintf("emulator: Host %q is not an address this emulator's HTTP server answers to; reach it at its address or its public URL (%s), or allow this name when starting it (--allow-host, Config.AllowHosts).", r.Host, s.public), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
