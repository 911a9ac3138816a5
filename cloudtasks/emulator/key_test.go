package emulator_test

import (
	"crypto/rand"
	"crypto/rsa"
)

// testKey is shared by every test server: generating an RSA key per
// server would dominate the test time.
var testKey = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()
