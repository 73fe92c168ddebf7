package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/tokenize"
)

// countingCounter counts words and records the longest text it was given.
type countingCounter struct{ longest int }

func (c *countingCounter) Count(s string) int {
	c.longest = max(c.longest, len(s))
	return len(strings.Fields(s))
}
func (c *countingCounter) Name() string { return "words" }

// TestCountTextPieces (issue 46 item 1): a reply is counted in pieces of
// at most countPiece bytes cut before a space, and no word longer than
// maxCountWord is handed to the tokenizer whole; the words are all
// counted.
func TestCountTextPieces(t *testing.T) {
	for _, c := range []struct {
		name  string
		text  string
		words int64 // by the counting counter: the pieces' fields
	}{
		{"short", "a b c", 3},
		{"prose", strings.Repeat("word ", 10_000), 10_000},
		{"one long word", strings.Repeat("x", 100_000), 0},
		{"long words between spaces", strings.Repeat(strings.Repeat("y", 3000)+" ", 40), 0},
	} {
		cc := &countingCounter{}
		got := countText(cc, c.text)
		if cc.longest > countPiece {
			t.Errorf("%s: a piece of %d bytes reached the tokenizer; want at most %d", c.name, cc.longest, countPiece)
		}
		if c.words > 0 && got != c.words {
			t.Errorf("%s: %d words counted; want %d", c.name, got, c.words)
		}
	}
}

// TestCountTextLongWordIsFast (issue 46 item 1): counting a 1 MiB answer
// of one word with a bundled tokenizer, whose byte-pair merges cost the
// square of a word's length (a 256 KiB word took over a minute), does not
// hang; prose counts as it did whole.
func TestCountTextLongWordIsFast(t *testing.T) {
	tok, err := tokenize.OpenLazy("cl100k_base", "")
	if err == nil {
		err = tok.Load()
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int64, 1)
	go func() { done <- countText(tok, strings.Repeat("x", 1<<20)) }()
	select {
	case n := <-done:
		if n < 1<<20/8 || n > 1<<20 {
			t.Errorf("a 1 MiB word counted %d tokens; want between 1/8 and 1 a byte", n)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("counting a 1 MiB word hung")
	}
	prose := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 2000)
	if got, want := countText(tok, prose), int64(tok.Count(prose)); got != want {
		t.Errorf("prose counted %d in pieces, %d whole", got, want)
	}
}
