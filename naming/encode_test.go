package naming

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"testing"
)

// TestHashTextMatchesStandardBase32 pins the hand-written encoder to
// encoding/base32 over many inputs, beyond the golden vectors.
func TestHashTextMatchesStandardBase32(t *testing.T) {
	t.Parallel()
	std := base32.StdEncoding.WithPadding(base32.NoPadding)
	for i := range 5000 {
		in := fmt.Sprintf("dispatch:run%d:task%d:%d", i%97, i, i%7)
		sum := sha256.Sum256([]byte(in))
		want := "d_" + strings.ToLower(std.EncodeToString(sum[:]))[:hashChars]
		if got := hashText("d_", in); got != want {
			t.Fatalf("hashText(%q) = %q, want %q", in, got, want)
		}
	}
}
