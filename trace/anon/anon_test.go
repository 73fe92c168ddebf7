package anon

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func testSalt(t *testing.T) Salt {
	t.Helper()
	s, err := ParseSalt("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseSalt(t *testing.T) {
	cases := []struct {
		text, err string
	}{
		{"00112233445566778899aabbccddeeff", ""},                   // 128 bits hex
		{"ABEiM0RVZneImaq7zN3u/w==", ""},                           // 128 bits base64
		{"0011223344556677", "64 bits"},                            // too short
		{"correct horse battery staple", "neither hex nor base64"}, // a passphrase
	}
	for _, c := range cases {
		_, err := ParseSalt(c.text)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.text, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one saying %q", c.text, err, c.err)
		}
	}
}

func TestIDsAreKeyedAndDomainSeparated(t *testing.T) {
	s := testSalt(t)
	other := RandomSalt()
	first, again := s.ID("request", "abc"), s.ID("request", "abc")
	if first != again {
		t.Error("ids are not deterministic")
	}
	if s.ID("request", "abc") == s.ID("session", "abc") {
		t.Error("the same raw value in two domains gave the same id")
	}
	if s.ID("request", "abc") == other.ID("request", "abc") {
		t.Error("two salts gave the same id")
	}
	if s.ID64("request", "abc") < 0 {
		t.Error("a negative id")
	}
	if h := s.HMAC("tenant", "acme"); len(h) != 32 || strings.Contains(h, "acme") {
		t.Errorf("tenant HMAC %q", h)
	}
	if s.Fingerprint() == other.Fingerprint() || len(s.Fingerprint()) != 16 {
		t.Error("fingerprints do not tell salts apart")
	}
}

func TestPrefixBlocksChainAndShare(t *testing.T) {
	s := testSalt(t)
	seq := func(n, diverge int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
			if i >= diverge {
				out[i] = 100000 + i
			}
		}
		return out
	}
	const b = 4
	a := s.PrefixBlocks(seq(10, 10), b) // 3 blocks: 4, 4, 2 tokens
	if len(a) != 3 {
		t.Fatalf("%d blocks for 10 tokens of 4, want ceil = 3", len(a))
	}
	// Diverging at token 5 (inside block 1): block 0 shared, the rest differ.
	c := s.PrefixBlocks(seq(10, 5), b)
	if a[0] != c[0] || a[1] == c[1] || a[2] == c[2] {
		t.Errorf("divergence in block 1: %v vs %v", a, c)
	}
	// A longer prompt with the same first 10 tokens shares the two full
	// blocks; the old partial block is not a prefix of the new full one.
	d := s.PrefixBlocks(seq(12, 12), b)
	if d[0] != a[0] || d[1] != a[1] || d[2] == a[2] {
		t.Errorf("extension: %v vs %v", d, a)
	}
	// Equal tails after different heads are not equal ids (chaining).
	e := s.PrefixBlocks(append([]int{99, 98, 97, 96}, seq(10, 10)[4:]...), b)
	if e[1] == a[1] {
		t.Error("a block id does not depend on the blocks before it")
	}
	if other := RandomSalt().PrefixBlocks(seq(10, 10), b); other[0] == a[0] {
		t.Error("block ids are not keyed by the salt")
	}
}

// TestKeyedIsHMAC: the allocation-free HMAC equals crypto/hmac's over the
// domain, its 0 byte and the message, for a short salt and for one longer
// than SHA-256's block, which HMAC hashes first; it allocates nothing.
func TestKeyedIsHMAC(t *testing.T) {
	for _, keyHex := range []string{"000102030405060708090a0b0c0d0e0f", strings.Repeat("ab", 100)} {
		s, err := ParseSalt(keyHex)
		if err != nil {
			t.Fatal(err)
		}
		k := s.Keyed("servetrace output v1")
		var buf []byte
		for _, msg := range []string{"", "Hello", strings.Repeat("long answer ", 1000)} {
			key, _ := hex.DecodeString(keyHex)
			m := hmac.New(sha256.New, key)
			m.Write([]byte("servetrace output v1\x00" + msg))
			buf = append(k.Start(buf), msg...)
			if got := k.Sum(buf); hex.EncodeToString(got[:]) != hex.EncodeToString(m.Sum(nil)) {
				t.Errorf("key of %d bytes, message of %d: %x, want %x", len(key), len(msg), got, m.Sum(nil))
			}
		}
		if a := testing.AllocsPerRun(100, func() { buf = append(k.Start(buf), "Hello"...); _ = k.Sum(buf) }); a != 0 {
			t.Errorf("%v allocations a sum", a)
		}
	}
}
