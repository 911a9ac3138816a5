package naming

import (
	"crypto/sha256"
	"regexp"
	"unsafe"
)

// CloudTaskIDLength is the length of every Cloud Tasks ID this package
// makes: a two-character prefix and 26 base32 characters (130 bits of the
// hash).
const CloudTaskIDLength = 2 + hashChars

const hashChars = 26

// cloudTaskIDPattern is what every Cloud Tasks ID made here looks like.
var cloudTaskIDPattern = regexp.MustCompile(`^[dt]_[a-z2-7]{26}$`)

// CloudTaskID returns the Cloud Tasks task ID for the ID: "d_" (dispatch) or
// "t_" (timer) and the first 26 characters of the lowercase, unpadded base32
// encoding of SHA-256 of the internal ID's text. The same ID always gives the
// same task ID, which is what makes creating the task idempotent.
// The zero ID has no task ID: it returns "".
func (id ID) CloudTaskID() string { return id.cloudID }

// TaskName returns the full resource name of the task whose ID is
// cloudTaskID in the queue whose full name is queuePath
// (projects/P/locations/L/queues/Q), or "" when either is empty.
func TaskName(queuePath, cloudTaskID string) string {
	if queuePath == "" || cloudTaskID == "" {
		return ""
	}
	return queuePath + "/tasks/" + cloudTaskID
}

// TaskName returns the full resource name of the ID's task in the queue
// whose full name is queuePath.
func (id ID) TaskName(queuePath string) string { return TaskName(queuePath, id.cloudID) }

// CloudTaskID parses internalID and returns its Cloud Tasks task ID. The
// error is that of Parse.
func CloudTaskID(internalID string) (string, error) {
	id, err := Parse(internalID)
	if err != nil {
		return "", err
	}
	return id.CloudTaskID(), nil
}

// IsCloudTaskID reports whether s has the form of a Cloud Tasks ID made by
// this package.
func IsCloudTaskID(s string) bool { return cloudTaskIDPattern.MatchString(s) }

// hashText does the hashing and encoding with one allocation, the returned
// string, which is filled in place.
func hashText(prefix, internalID string) string {
	// The hash only reads its input, so the string's bytes are viewed in
	// place rather than copied.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(internalID), len(internalID)))
	buf := make([]byte, CloudTaskIDLength)
	out := (*[CloudTaskIDLength]byte)(buf)
	out[0], out[1] = prefix[0], prefix[1]
	encodeGroup(out, 2, &sum, 0)
	encodeGroup(out, 10, &sum, 5)
	encodeGroup(out, 18, &sum, 10)
	v := uint(sum[15])<<8 | uint(sum[16])
	out[26] = base32Alphabet[v>>11&31]
	out[27] = base32Alphabet[v>>6&31]
	// buf is never written again, so it can become the string without the
	// copy a conversion would make.
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

// base32Alphabet is RFC 4648's base32 alphabet in lowercase.
const base32Alphabet = "abcdefghijklmnopqrstuvwxyz234567"

// encodeGroup writes the 8 base32 characters of the 5 bytes of sum at from
// into out at to. The 26 characters of a task ID need 130 bits, three such
// groups and 10 bits more, so this does that much and no more instead of
// running a general encoder over 20 bytes; the golden tests pin the result
// to encoding/base32's output.
func encodeGroup(out *[CloudTaskIDLength]byte, to int, sum *[sha256.Size]byte, from int) {
	b := (*[5]byte)(sum[from : from+5])
	v := uint64(b[0])<<32 | uint64(b[1])<<24 | uint64(b[2])<<16 | uint64(b[3])<<8 | uint64(b[4])
	o := (*[8]byte)(out[to : to+8])
	o[0] = base32Alphabet[v>>35&31]
	o[1] = base32Alphabet[v>>30&31]
	o[2] = base32Alphabet[v>>25&31]
	o[3] = base32Alphabet[v>>20&31]
	o[4] = base32Alphabet[v>>15&31]
	o[5] = base32Alphabet[v>>10&31]
	o[6] = base32Alphabet[v>>5&31]
	o[7] = base32Alphabet[v&31]
}
