package emulator

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/taskheader"
)

// requestLocked builds the HTTP request of t's attempt at now, as the
// service sends it: the task's and its queue's settings, the X-CloudTasks-*
// headers and the authorization, and the Delivery that records it. The
// request is nil if it could not be built.
func (s *Server) requestLocked(t *task, now time.Time) (*http.Request, Delivery) {
	p := t.pb
	hr := p.GetHttpRequest()
	target := requestTarget{url: hr.Url, method: hr.HttpMethod, oidc: hr.GetOidcToken(), oauth: hr.GetOauthToken()}
	h := make(http.Header, len(t.headers)/2+10)
	for i := 0; i+1 < len(t.headers); i += 2 {
		h.Set(t.headers[i], t.headers[i+1])
	}
	target.applyQueue(t.q.pb.HttpTarget, h)
	dropServiceHeaders(h)
	method := target.method
	if method == cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
		method = cloudtaskspb.HttpMethod_POST
	}
	var body io.Reader
	if len(hr.Body) > 0 {
		body = bytes.NewReader(hr.Body)
	}
	req, err := http.NewRequest(method.String(), target.url, body)
	if err != nil {
		// validateTask accepted the URL, so this is unexpected; record it as a
		// failed attempt rather than crash the loop.
		req = nil
	}
	_, taskID, _ := parseTaskName(p.Name)
	h.Set("User-Agent", "Google-Cloud-Tasks")
	h.Set(taskheader.QueueName, t.q.id)
	h.Set(taskheader.TaskName, taskID)
	h.Set(taskheader.RetryCount, strconv.Itoa(int(p.DispatchCount-1)))
	h.Set(taskheader.ExecutionCount, strconv.Itoa(int(t.executions)))
	h.Set(taskheader.ETA, strconv.FormatFloat(float64(t.schedule)/1e9, 'f', 6, 64))
	if t.prevResponse != 0 {
		h.Set(taskheader.PreviousResponse, strconv.Itoa(int(t.prevResponse)))
	}
	if t.retryReason != "" {
		h.Set(taskheader.RetryReason, t.retryReason)
	}
	switch {
	case target.oidc != nil:
		aud := target.oidc.Audience
		if aud == "" {
			aud = target.url
		}
		tok, terr := s.signOIDC(target.oidc.ServiceAccountEmail, aud, now)
		if terr == nil {
			h.Set("Authorization", "Bearer "+tok)
		} else {
			s.log.Warn("emulator: signing OIDC token", "error", terr)
		}
	case target.oauth != nil:
		h.Set("Authorization", "Bearer emulator-oauth-token."+target.oauth.ServiceAccountEmail)
	}
	rec := Delivery{
		Queue: t.q.pb.Name, Task: p.Name, Attempt: p.DispatchCount,
		Method: method.String(), URL: target.url, Header: h.Clone(), Body: hr.Body,
		ScheduleTime: time.Unix(0, t.schedule), DispatchTime: now,
	}
	if req != nil {
		// Host comes from the URL and Content-Length from the body, as the
		// service computes them; net/http does both.
		req.Header = h.Clone()
		sendOnce(req, hr.Body)
	}
	return req, rec
}

// sendOnce makes req a request net/http's Transport never sends twice on
// its own. The Transport sends a replayable request again on a fresh
// connection when a reused one closes without an answer; replayable is a
// GET, HEAD, OPTIONS or TRACE, or a request with an Idempotency-Key or
// X-Idempotency-Key header, whose body is absent or can be re-read
// (GetBody). The worker would then see an attempt the emulator never
// recorded. Each branch keeps the request the same on the wire:
//   - a body is given without GetBody, its length still known;
//   - an empty body for a method that usually has none (GET, HEAD,
//     DELETE, OPTIONS) is an empty reader, which the Transport reads
//     before it sends and then sends no body, as for none;
//   - POST, PUT and PATCH without a body are not replayable unless they
//     carry an idempotency header; the Transport looks for it under its
//     canonical name only, so it is kept under its lower-case name, which
//     HTTP/1.1 and HTTP/2 servers read as the same header.
//
// A connection closed without an answer is then one failed attempt,
// retried after the queue's backoff as every other failed attempt is.
func sendOnce(req *http.Request, body []byte) {
	req.GetBody = nil
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
		if len(body) == 0 {
			req.Body = io.NopCloser(bytes.NewReader(nil))
			return
		}
	}
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		return
	}
	for _, k := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := req.Header[k]; ok {
			delete(req.Header, k)
			req.Header[strings.ToLower(k)] = v
		}
	}
}

// dropServiceHeaders removes the headers a task may not set: the service
// computes Host (from the URL) and Content-Length (from the body), and
// keeps X-Google-* and X-AppEngine-* for its own use, so the v2 HttpRequest
// documentation says the task's values are ignored or replaced.
func dropServiceHeaders(h http.Header) {
	for k := range h {
		if k == "Host" || k == "Content-Length" || hasFoldPrefix(k, "X-Google-") || hasFoldPrefix(k, "X-AppEngine-") {
			delete(h, k)
		}
	}
}

func hasFoldPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// requestTarget is where and how an attempt is sent, after the queue's
// http_target overrides.
type requestTarget struct {
	url    string
	method cloudtaskspb.HttpMethod
	oidc   *cloudtaskspb.OidcToken
	oauth  *cloudtaskspb.OAuthToken
}

// applyQueue applies a queue's http_target: its URI parts (always, or only
// where the task has none with IF_NOT_EXISTS), method, header overrides
// and authorization, which replace the task's own.
func (rt *requestTarget) applyQueue(ht *cloudtaskspb.HttpTarget, h http.Header) {
	if ht == nil {
		return
	}
	if ht.HttpMethod != cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
		rt.method = ht.HttpMethod
	}
	for _, o := range ht.HeaderOverrides {
		if hd := o.GetHeader(); hd != nil && hd.Key != "" {
			h.Set(hd.Key, hd.Value)
		}
	}
	switch {
	case ht.GetOidcToken() != nil:
		rt.oidc, rt.oauth = ht.GetOidcToken(), nil
	case ht.GetOauthToken() != nil:
		rt.oidc, rt.oauth = nil, ht.GetOauthToken()
	}
	uo := ht.UriOverride
	if uo == nil {
		return
	}
	u, err := url.Parse(rt.url)
	if err != nil {
		return
	}
	always := uo.UriOverrideEnforceMode != cloudtaskspb.UriOverride_IF_NOT_EXISTS
	if uo.Scheme != nil && always {
		u.Scheme = strings.ToLower(uo.GetScheme().String())
	}
	host, port := u.Hostname(), u.Port()
	if uo.Host != nil && (always || host == "") {
		host = uo.GetHost()
	}
	if uo.Port != nil && (always || port == "") {
		port = strconv.FormatInt(uo.GetPort(), 10)
	}
	u.Host = host
	if port != "" {
		u.Host = net.JoinHostPort(host, port)
	}
	if uo.PathOverride != nil && (always || u.Path == "" || u.Path == "/") {
		u.Path = uo.PathOverride.Path
	}
	if uo.QueryOverride != nil && (always || u.RawQuery == "") {
		u.RawQuery = uo.QueryOverride.QueryParams
	}
	rt.url = u.String()
}
