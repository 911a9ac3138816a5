package emulator

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"sort"
	"strings"
	"time"
)

// pageTokenLifetime is how long a page token stays valid on the
// emulator's clock: "The page token is valid for only 2 hours", as the v2
// ListQueuesResponse and ListTasksRequest docs say.
const pageTokenLifetime = 2 * time.Hour

// pageMACSize is how many bytes of the HMAC-SHA256 a token carries: 128
// bits, far beyond what a test could guess.
const pageMACSize = 16

// pageTokens issues and checks page tokens. A token carries the last name
// of its page, the time it was issued, and a MAC over both and the request
// it answers (the method and the fields that select the collection, such
// as parent and filter), keyed by a secret of this server. So a token
// another server issued, one made for another queue or filter, an edited
// one and an expired one are all refused with InvalidArgument, while a
// token stays valid when its own task is deleted (the next page starts
// after its name). Page size is not bound: the docs let a caller change it
// between pages.
type pageTokens struct {
	key [32]byte
}

func newPageTokens() *pageTokens {
	p := &pageTokens{}
	_, _ = rand.Read(p.key[:]) // never fails (crypto/rand documents it)
	return p
}

// pageScope names the request a token belongs to: the method and the
// request fields that must not change between pages.
func pageScope(method string, fields ...string) string {
	return method + "\x00" + strings.Join(fields, "\x00")
}

func (p *pageTokens) mac(scope string, payload []byte) []byte {
	m := hmac.New(sha256.New, p.key[:])
	m.Write([]byte(scope))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:pageMACSize]
}

// issue returns the token of the page after last, issued at now.
func (p *pageTokens) issue(scope, last string, now time.Time) string {
	payload := binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano()))
	payload = append(payload, last...)
	return base64.RawURLEncoding.EncodeToString(append(payload, p.mac(scope, payload)...))
}

// open checks a token against the request's scope and returns the name
// its page starts after ("" for the first page).
func (p *pageTokens) open(scope, token string, now time.Time) (after string, err error) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 8+pageMACSize {
		return "", invalid("page_token %q is malformed: it is not one this server returned", shorten(token))
	}
	payload, sum := b[:len(b)-pageMACSize], b[len(b)-pageMACSize:]
	if !hmac.Equal(sum, p.mac(scope, payload)) {
		return "", invalid("page_token %q was not returned by this server for this request; a token is valid only for the parent and filter of the call that returned it", shorten(token))
	}
	issued := time.Unix(0, int64(binary.BigEndian.Uint64(payload)))
	if now.Sub(issued) > pageTokenLifetime {
		return "", invalid("page_token %q expired: it was issued at %s and a page token is valid for %s", shorten(token), issued.UTC().Format(time.RFC3339), pageTokenLifetime)
	}
	return string(payload[8:]), nil
}

// pageSize applies the documented default and maximum to a page_size.
func pageSize(size int32, maxSize int) (int, error) {
	if size < 0 {
		return 0, invalid("page_size %d must not be negative", size)
	}
	if size == 0 || int(size) > maxSize {
		return maxSize, nil
	}
	return int(size), nil
}

// pageRequest is a List call's paging fields, checked.
type pageRequest struct {
	scope string
	after string // the page starts after this name
	size  int
}

// startPage checks a List call's page_size and page_token for scope.
func (s *Server) startPage(scope, token string, size int32, maxSize int) (pageRequest, error) {
	n, err := pageSize(size, maxSize)
	if err != nil {
		return pageRequest{}, err
	}
	after, err := s.pages.open(scope, token, s.clock.Now())
	if err != nil {
		return pageRequest{}, err
	}
	return pageRequest{scope: scope, after: after, size: n}, nil
}

// next returns the token of the page after the one ending with last.
func (s *Server) next(pr pageRequest, last string) string {
	return s.pages.issue(pr.scope, last, s.clock.Now())
}

// page sorts names (all after pr.after) and returns the items of the
// first pr.size of them, with the token of the next page ("" on the last
// page).
func page[T any](s *Server, pr pageRequest, names []string, item func(name string) T) (items []T, next string) {
	sort.Strings(names)
	for i, n := range names {
		if i == pr.size {
			return items, s.next(pr, names[i-1])
		}
		items = append(items, item(n))
	}
	return items, ""
}
