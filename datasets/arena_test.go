package datasets

import (
	"strings"
	"testing"
)

// TestStringArenaKeepsEveryString: strings made from one reused buffer,
// short and long, across many blocks, each keep their own bytes after the
// buffer and the arena move on.
func TestStringArenaKeepsEveryString(t *testing.T) {
	var a stringArena
	buf := make([]byte, 0, 64)
	var got, want []string
	for i := range 50_000 {
		n := i % 37
		if i%1000 == 0 {
			n = arenaBytes/8 + 1 // past the arena: its own allocation
		}
		buf = buf[:0]
		for j := range n {
			buf = append(buf, byte('a'+(i+j)%26))
		}
		want = append(want, string(buf))
		got = append(got, a.string(buf))
		buf = append(buf[:0], strings.Repeat("#", n)...) // the source changes under the string
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("string %d: %q, made from %q", i, got[i], want[i])
		}
	}
}
