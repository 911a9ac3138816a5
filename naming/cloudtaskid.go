package naming

import (
	"crypto/sha256"
	"encoding/base32"
	"regexp"
	"unsafe"
)

// CloudTaskIDLength is the length of every Cloud Tasks ID this package
// makes: a two-character prefix and 26 base32 characters (130 bits of the
// hash).
const CloudTaskIDLength = 2 + hashChars

const hashChars = 26

// lowerBase32 is RFC 4648 base32 with a lowercase alphabet and no padding:
// padding '=' is not allowed in a task ID, and lowercase saves a pass.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// cloudTaskIDPattern is what every Cloud Tasks ID made here looks like.
var cloudTaskIDPattern = regexp.MustCompile(`^[dt]_[a-z2-7]{26}$`)

// CloudTaskID returns the Cloud Tasks task ID for the ID: "d_" (dispatch) or
// "t_" (timer) and the first 26 characters of the lowercase, unpadded base32
// encoding of SHA-256 of the internal ID's text. The same ID always gives the
// same task ID, which is what makes creating the task idempotent.
func (id ID) CloudTaskID() string {
	var buf [MaxIDLength]byte
	return hashText(id.Kind.prefix(), id.appendText(buf[:0]))
}

// CloudTaskID parses internalID and returns its Cloud Tasks task ID. The
// error is that of Parse.
func CloudTaskID(internalID string) (string, error) {
	id, err := Parse(internalID)
	if err != nil {
		return "", err
	}
	// The hash only reads its input, so the string's bytes are viewed in
	// place rather than copied.
	return hashText(id.Kind.prefix(), unsafe.Slice(unsafe.StringData(internalID), len(internalID))), nil
}

// IsCloudTaskID reports whether s has the form of a Cloud Tasks ID made by
// this package.
func IsCloudTaskID(s string) bool { return cloudTaskIDPattern.MatchString(s) }

// hashText does the hashing and encoding with one allocation, the returned
// string: the hash and the encoded text stay on the stack.
func hashText(prefix string, internalID []byte) string {
	sum := sha256.Sum256(internalID)
	var out [2 + 32]byte
	copy(out[:2], prefix)
	// 20 bytes encode to exactly 32 characters with no partial group, and the
	// first 26 of them are the first 26 of the whole hash's encoding.
	lowerBase32.Encode(out[2:], sum[:20])
	return string(out[:CloudTaskIDLength])
}
