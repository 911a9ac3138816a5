package emulator

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"slices"

	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// emptyPolicyEtag is the etag IAM gives a resource whose policy was never
// set ("ACAB" in base64, as gcloud shows it).
var emptyPolicyEtag = []byte{0x00, 0x20, 0x01}

// defaultPolicyMask is what SetIamPolicy changes when the request has no
// update_mask, as the IAM API documents.
var defaultPolicyMask = []string{"bindings", "etag"}

// policyFields are the update_mask paths SetIamPolicy accepts.
var policyFields = []string{"audit_configs", "bindings", "etag", "version"}

// iamPolicy returns a copy of the queue's policy; a queue whose policy was
// never set has an empty one.
func (q *queue) iamPolicy() *iampb.Policy {
	if q.policy == nil {
		return &iampb.Policy{Etag: slices.Clone(emptyPolicyEtag)}
	}
	return proto.Clone(q.policy).(*iampb.Policy)
}

// setIAMPolicy replaces the fields of the queue's policy named by paths
// (bindings and etag when there are none) with in's. A non-empty etag in in
// must be the current policy's, so two read-modify-write cycles cannot
// overwrite each other: the later one gets Aborted, as from IAM. rev makes
// the new etag.
func (q *queue) setIAMPolicy(in *iampb.Policy, paths []string, rev uint64) (*iampb.Policy, error) {
	cur := q.iamPolicy()
	if len(in.Etag) > 0 && !bytes.Equal(in.Etag, cur.Etag) {
		return nil, status.Errorf(codes.Aborted, "policy.etag %q is not the current etag %q of %s; read the policy again and reapply the change",
			base64.StdEncoding.EncodeToString(in.Etag), base64.StdEncoding.EncodeToString(cur.Etag), q.pb.Name)
	}
	if len(paths) == 0 {
		paths = defaultPolicyMask
	}
	next := cur
	for _, p := range paths {
		switch p {
		case "bindings":
			next.Bindings = in.Bindings
		case "audit_configs":
			next.AuditConfigs = in.AuditConfigs
		case "version":
			next.Version = in.Version
		case "etag":
		default:
			return nil, invalid("update_mask path %q is not a policy field; allowed: %v", p, policyFields)
		}
	}
	next.Etag = binary.BigEndian.AppendUint64([]byte{0x00, 0x21}, rev)
	q.policy = proto.Clone(next).(*iampb.Policy)
	return next, nil
}
