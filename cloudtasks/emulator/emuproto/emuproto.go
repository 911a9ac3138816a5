// Package emuproto is what the Cloud Tasks emulator (cloudtasks/emulator)
// says outside the Cloud Tasks API, to tools in other processes such as
// ctdispatch console and ctdispatch emulator health: the paths of the
// emulator's HTTP server, the inspection answer, the health service's
// name, and the gRPC extensions by which a tool that knows only the
// emulator's gRPC address finds the rest. A program that runs the emulator
// in-process reaches the same things through its Server's methods; a tool
// that reads a running emulator (`ctdispatch emulator` in a container,
// say) decodes what it answers with these types.
package emuproto

import (
	"crypto/rsa"
	"encoding/base64"
	"math/big"
	"net/http"
	"time"
)

// Paths served by the emulator's HTTP server.
const (
	// DiscoveryPath serves the OpenID Connect discovery document.
	DiscoveryPath = "/.well-known/openid-configuration"
	// JWKSPath serves the public keys that verify the OIDC tokens, as JSON
	// Web Keys (the path of Google's own key set, which Go's idtoken reads).
	JWKSPath = "/oauth2/v3/certs"
	// PEMCertsPath serves the same keys in PEM form, keyed by key ID (the
	// path and shape of Google's v1 endpoint, which Node's
	// google-auth-library and Python's google-auth read).
	PEMCertsPath = "/oauth2/v1/certs"
	// InspectPath serves an Inspection as JSON: a read-only view of the
	// queues' load and the recent delivery attempts, for tools in another
	// process (such as ctdispatch console) that the Cloud Tasks API cannot
	// tell. Query parameter "limit" bounds the deliveries returned (newest
	// first; default and maximum the emulator's DefaultDeliveryLogLimit),
	// "queue" keeps only one queue's attempts, and "task" only one task's.
	InspectPath = "/emulator/v1/inspect"
)

// HealthService is the service name under which the emulator reports
// itself SERVING through the standard gRPC health protocol
// (grpc.health.v1.Health), as does the empty name that asks about the
// whole server. Container health checks, Kubernetes gRPC probes and
// grpc_health_probe speak that protocol without knowing Cloud Tasks.
const HealthService = "google.cloud.tasks.v2.CloudTasks"

// Wildcard stands for any project or location ID in the parent of
// ListLocations ("projects/-") and ListQueues ("projects/-/locations/-",
// or one of the two), as in Google's API design rule for reading across
// collections (AIP-159). It is the emulator's own extension: a tool that
// knows only the emulator's address (such as ctdispatch console) finds
// every queue it holds without being told a project. Real Cloud Tasks does
// not document it; send it only to an emulator.
const Wildcard = "-"

// HTTPAddrMetadata is the gRPC response header in which ListLocations
// tells the address of the emulator's HTTP server, where InspectPath is
// served; a tool that knows only the gRPC address reads it from there.
// Real Cloud Tasks sends no such header.
const HTTPAddrMetadata = "x-ctdispatch-emulator-http"

// RedactedValue replaces the value of a header wherever the emulator or a
// tool shows a request: every header that is not on the emulator's list
// of headers known to carry no secret (see the emulator's Inspection
// documentation), Authorization among them.
const RedactedValue = "[redacted]"

// Inspection is what InspectPath answers.
type Inspection struct {
	// Now is the emulator's clock when the answer was made.
	Now time.Time `json:"now"`
	// Queues holds the load of every queue, sorted by name.
	Queues []QueueLoad `json:"queues"`
	// Deliveries holds the selected attempts, newest first.
	Deliveries []DeliveryRecord `json:"deliveries"`
}

// QueueLoad counts a queue's tasks by what they are doing.
type QueueLoad struct {
	// Name is the queue's full resource name.
	Name string `json:"name"`
	// Tasks counts every stored task.
	Tasks int `json:"tasks"`
	// Waiting counts tasks that are due but not yet dispatched (held back
	// by rate limits, a paused queue, or a loop that has not run yet).
	Waiting int `json:"waiting"`
	// Scheduled counts tasks whose schedule time is still ahead.
	Scheduled int `json:"scheduled"`
	// Running counts attempts in flight.
	Running int `json:"running"`
}

// DeliveryRecord is one delivery attempt as InspectPath shows it: the
// emulator's Delivery with header values redacted (RedactedValue) and the
// body replaced by its size.
type DeliveryRecord struct {
	// Queue and Task are full resource names.
	Queue string `json:"queue"`
	Task  string `json:"task"`
	// Attempt counts from 1.
	Attempt int32 `json:"attempt"`
	// Method, URL and Header are the request as sent, redacted.
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header"`
	// BodyBytes is the size of the request body.
	BodyBytes int `json:"body_bytes"`
	// ScheduleTime, DispatchTime and ResponseTime come from the clock.
	ScheduleTime time.Time `json:"schedule_time"`
	DispatchTime time.Time `json:"dispatch_time"`
	ResponseTime time.Time `json:"response_time"`
	// StatusCode is the worker's HTTP status, 0 when there was no response.
	StatusCode int `json:"status_code"`
	// Err describes a failure without a response.
	Err string `json:"error,omitempty"`
	// Outcome is one of the emulator's Outcome… values.
	Outcome string `json:"outcome"`
	// Fault is the delivery fault that happened to the attempt, if any
	// (emulator.DeliveryFault: lose_reply, deliver_twice, …).
	Fault string `json:"fault,omitempty"`
}

// JWK is one RSA public key in JSON Web Key form, as JWKSPath serves it.
type JWK struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// PublicKey decodes the key's modulus and exponent.
func (k JWK) PublicKey() (*rsa.PublicKey, error) {
	n, err := base64.RawURLEncoding.DecodeString(k.N)
	if err != nil {
		return nil, err
	}
	e, err := base64.RawURLEncoding.DecodeString(k.E)
	if err != nil {
		return nil, err
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
}

// JWKS is a JSON Web Key Set, as served at JWKSPath.
type JWKS struct {
	Keys []JWK `json:"keys"`
}
