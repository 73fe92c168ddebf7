package replay

import (
	"crypto/rand"
	"encoding/hex"
)

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails on supported platforms (Go 1.24+)
	return hex.EncodeToString(b)
}
