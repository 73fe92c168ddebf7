package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/servetrace/servetrace/internal/memcap"
)

// scanMerge is merge's scan for the lowest pair, whatever the piece's
// length: the truth mergeLong is held to.
func scanMerge(ranks map[string]int, piece string) []int {
	var m merger
	m.starts, m.pair = m.starts[:0], m.pair[:0]
	for i := range len(piece) + 1 {
		m.starts = append(m.starts, i)
	}
	for k := range len(piece) - 1 {
		m.pair = append(m.pair, m.rank(ranks, piece, k))
	}
	for len(m.pair) > 0 {
		best, at := noRank, -1
		for k, r := range m.pair {
			if r < best {
				best, at = r, k
			}
		}
		if at < 0 {
			break
		}
		m.starts = slices.Delete(m.starts, at+1, at+2)
		m.pair = slices.Delete(m.pair, at, at+1)
		if at < len(m.pair) {
			m.pair[at] = m.rank(ranks, piece, at)
		}
		if at > 0 {
			m.pair[at-1] = m.rank(ranks, piece, at-1)
		}
	}
	return slices.Clone(m.starts)
}

// TestMergeLongJoinsAsTheScanDoes holds the heap merge of long pieces to
// the scan's joins on pieces where ties and re-ranked neighbours abound:
// runs of one letter, of two, random words and random bytes.
func TestMergeLongJoinsAsTheScanDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 46))
	randomOver := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	pieces := []string{strings.Repeat("a", 1000), strings.Repeat("ab", 700), strings.Repeat("=", 513), strings.Repeat("aab", 300)}
	for range 40 {
		pieces = append(pieces, randomOver("abcdefghijklmnopqrstuvwxyz", 257+rng.IntN(1500)), randomOver("aeinst", 257+rng.IntN(1500)),
			randomOver("0123456789", 257+rng.IntN(800)), randomOver("\x00\x7f\xc3\xa9\xff abc", 257+rng.IntN(800)))
	}
	for _, name := range []string{CL100K, O200K, P50K} {
		enc := handWrittenEncoder(t, name)
		var m merger
		for _, p := range pieces {
			want := scanMerge(enc.ranks, p)
			if got := m.mergeLong(enc.ranks, p); !slices.Equal(got, want) {
				t.Fatalf("%s, piece of %d bytes %q...: heap joins %v, scan %v", name, len(p), p[:20], got, want)
			}
		}
	}
}

// TestLongWordCountsInReason counts a word of a mebibyte, as a hostile log
// or server may send: the scan took minutes (a quarter of it, 75 s); the
// test only asks that it did not hang.
func TestLongWordCountsInReason(t *testing.T) {
	if raceEnabled {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	enc := handWrittenEncoder(t, CL100K)
	word := strings.Repeat("abcdefgh", 1<<17)
	done := make(chan int, 1)
	go func() { done <- enc.count(word) }()
	select {
	case n := <-done:
		if n <= 0 || n > len(word) {
			t.Fatalf("%d tokens for %d bytes", n, len(word))
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("counting a 1 MiB word did not finish in 2 minutes")
	}
}

// TestLongWordsMergeWithinAFewMiB counts an 8 MiB word and encodes a
// 3 MiB one under a 256 MiB cap: a merge holds at most maxMergePiece
// bytes' worth of parts. Before, a merge held about a hundred bytes for
// each byte of its piece, and a few such log lines exhausted a convert.
func TestLongWordsMergeWithinAFewMiB(t *testing.T) {
	if raceEnabled {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	memcap.Run(t, 256<<20, func(t *testing.T) {
		enc := handWrittenEncoder(t, CL100K)
		word := strings.Repeat("b", 8<<20)
		if n := enc.count(word); n <= 0 || n > len(word) {
			t.Fatalf("%d tokens for %d bytes", n, len(word))
		}
		ids := enc.appendTokens(nil, strings.Repeat("xyz", 1<<20))
		if len(ids) == 0 {
			t.Fatal("no ids")
		}
	})
}

// TestCutPieceKeepsCharacters: a long piece is cut at character
// boundaries, every byte in exactly one part, no part over the bound.
func TestCutPieceKeepsCharacters(t *testing.T) {
	for _, piece := range []string{strings.Repeat("a", 3*maxMergePiece+5), strings.Repeat("東", maxMergePiece), "short"} {
		var parts []string
		for rest := piece; len(rest) > 0; {
			var part string
			part, rest = cutPiece(rest)
			if len(part) == 0 || len(part) > maxMergePiece || !utf8.ValidString(part) {
				t.Fatalf("a part of %d bytes (valid UTF-8 %v)", len(part), utf8.ValidString(part))
			}
			parts = append(parts, part)
		}
		if strings.Join(parts, "") != piece {
			t.Fatal("the parts do not make up the piece")
		}
	}
}
