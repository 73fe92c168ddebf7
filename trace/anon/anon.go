// Package anon turns identifying values into keyed hashes: request and
// session ids into salted 64-bit ids, tenant and user ids into HMACs, and
// prompt token sequences into chained prefix-block ids (docs/architecture.md:
// block i covers tokens [i·B, (i+1)·B), its id is keyed and chained over
// every token up to the block's end, the last partial block included).
//
// Everything is keyed by one salt. The same salt links ids across
// conversions; without one, a random salt is used and ids do not link. The
// salt itself is never written anywhere: the manifest carries only its
// fingerprint.
package anon

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"strings"
)

// SaltEnv is the environment variable a salt may come from.
const SaltEnv = "SERVETRACE_SALT"

// MinSaltBytes is the least key material a salt must carry (128 bits).
const MinSaltBytes = 16

// Salt keys every hash. The zero value is unusable; use LoadSalt or
// RandomSalt.
type Salt struct {
	key []byte
	// Random is true when no salt was given: ids will not link across
	// conversions.
	Random bool
}

// RandomSalt returns a fresh 256-bit salt.
func RandomSalt() Salt {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(fmt.Sprintf("anon: no randomness: %v", err)) // crypto/rand does not fail on Linux
	}
	return Salt{key: k, Random: true}
}

// IsZero reports whether s is the zero Salt, which keys nothing.
func (s Salt) IsZero() bool { return len(s.key) == 0 }

// ParseSalt decodes salt text: hex or base64 carrying at least 128 bits.
func ParseSalt(text string) (Salt, error) {
	text = strings.TrimSpace(text)
	var key []byte
	if b, err := hex.DecodeString(text); err == nil {
		key = b
	} else if b, err := base64.StdEncoding.DecodeString(text); err == nil {
		key = b
	} else if b, err := base64.RawStdEncoding.DecodeString(text); err == nil {
		key = b
	} else {
		return Salt{}, errors.New("the salt is neither hex nor base64; make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
	}
	if len(key) < MinSaltBytes {
		return Salt{}, fmt.Errorf("the salt carries %d bits, at least %d are needed; make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'", 8*len(key), 8*MinSaltBytes)
	}
	return Salt{key: key}, nil
}

// LoadSalt returns the salt in $SERVETRACE_SALT, else a random one
// (Random set). A salt file is the caller's to read, bounded and never
// from a named pipe (cmd/servetrace's loadSalt), and to parse with
// ParseSalt.
func LoadSalt() (Salt, error) {
	if v := os.Getenv(SaltEnv); v != "" {
		s, err := ParseSalt(v)
		if err != nil {
			return Salt{}, fmt.Errorf("$%s: %w", SaltEnv, err)
		}
		return s, nil
	}
	return RandomSalt(), nil
}

// Fingerprint identifies the salt without revealing it: two conversions
// with the same fingerprint produce linkable ids.
func (s Salt) Fingerprint() string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("servetrace salt fingerprint v1"))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// mac returns an HMAC keyed by the salt and a domain, so equal raw values in
// different domains (a user id and a request id) never collide.
func (s Salt) mac(domain string) hash.Hash {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(domain))
	m.Write([]byte{0})
	return m
}

// Keyed computes HMAC-SHA256 under a salt and a domain without
// allocating: the caller appends the message after Start in a buffer of
// its own and calls Sum, and gets what the salt's HMAC of the domain, fed
// the same message, would give. For values hashed by the million (a
// replay's answers).
type Keyed struct {
	prefix []byte   // the inner pad, then the domain and its 0 byte
	opad   [64]byte // the outer pad
}

// Keyed returns the salt's Keyed HMAC for a domain.
func (s Salt) Keyed(domain string) *Keyed {
	key := s.key
	if len(key) > sha256.BlockSize { // HMAC hashes a long key first
		sum := sha256.Sum256(key)
		key = sum[:]
	}
	k := &Keyed{prefix: make([]byte, sha256.BlockSize, sha256.BlockSize+len(domain)+1)}
	copy(k.prefix, key)
	copy(k.opad[:], key)
	for i := range sha256.BlockSize {
		k.prefix[i] ^= 0x36
		k.opad[i] ^= 0x5c
	}
	k.prefix = append(append(k.prefix, domain...), 0)
	return k
}

// Start returns buf emptied and holding what precedes the message.
func (k *Keyed) Start(buf []byte) []byte { return append(buf[:0], k.prefix...) }

// Sum returns the HMAC of the message appended to Start's buffer.
func (k *Keyed) Sum(buf []byte) [sha256.Size]byte { return k.SumInner(sha256.Sum256(buf)) }

// SumInner returns the HMAC whose inner hash, SHA-256 of Start's prefix
// and then the message, is inner: for a message too long to gather in a
// buffer, hashed as it comes.
func (k *Keyed) SumInner(inner [sha256.Size]byte) [sha256.Size]byte {
	var outer [sha256.BlockSize + sha256.Size]byte
	copy(outer[:], k.opad[:])
	copy(outer[sha256.BlockSize:], inner[:])
	return sha256.Sum256(outer[:])
}

// ID64 is the salted 64-bit id of a raw value in a domain, non-negative
// (63 bits), as Mooncake's ids are.
func (s Salt) ID64(domain, raw string) int64 {
	m := s.mac(domain)
	m.Write([]byte(raw))
	return int64(binary.LittleEndian.Uint64(m.Sum(nil)) >> 1)
}

// ID is ID64 as 16 hex digits, for string id columns.
func (s Salt) ID(domain, raw string) string {
	return fmt.Sprintf("%016x", uint64(s.ID64(domain, raw)))
}

// HMAC is the keyed hash of a raw value in a domain, 128 bits as hex: for
// tenant and user ids, and for model names with --hash-names.
func (s Salt) HMAC(domain, raw string) string {
	m := s.mac(domain)
	m.Write([]byte(raw))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// PrefixBlocks returns the chained keyed ids of a token sequence's blocks
// of size b: ceil(len(tokens)/b) ids, the last partial block included.
// Block i's id covers every token up to its end, so equal ids mean an
// identical prefix through that block.
func (s Salt) PrefixBlocks(tokens []int, b int) []int64 {
	if b <= 0 || len(tokens) == 0 {
		return nil
	}
	out := make([]int64, 0, (len(tokens)+b-1)/b)
	var chain [sha256.Size]byte
	buf := make([]byte, 0, 4*b+len(chain))
	m := s.mac("prefix-block")
	for start := 0; start < len(tokens); start += b {
		end := min(start+b, len(tokens))
		buf = append(buf[:0], chain[:]...)
		for _, t := range tokens[start:end] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		m.Reset()
		m.Write([]byte("prefix-block\x00"))
		m.Write(buf)
		copy(chain[:], m.Sum(nil))
		out = append(out, int64(binary.LittleEndian.Uint64(chain[:])>>1))
	}
	return out
}
