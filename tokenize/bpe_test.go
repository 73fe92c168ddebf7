package tokenize

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktokenEncoding is tiktoken-go's own encoding of that name, the
// independent truth the hand-written pre-tokenizers and merges are held to.
func tiktokenEncoding(t testing.TB, name string) *tiktoken.Tiktoken {
	t.Helper()
	setLoader()
	enc, err := tiktoken.GetEncoding(name)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// setLoader installs the offline BPE loader once, so that tiktoken-go
// never reaches for the network.
var setLoader = sync.OnceFunc(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })

// handWrittenEncoder is the bundled encoding's hand-written encoder.
func handWrittenEncoder(t testing.TB, name string) bpeEncoder {
	t.Helper()
	hw := handWritten[name]
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(hw.file)
	if err != nil {
		t.Fatal(err)
	}
	return bpeEncoder{ranks: ranks, piece: hw.piece}
}

// trickyTexts are pre-tokenizer corners: contractions in any case and
// after letters, a space before punctuation, runs of spaces before a word,
// at the end and before newlines, CR/LF mixes, digits in threes, combining
// marks, non-ASCII spaces and digits, and bytes that are not UTF-8.
var trickyTexts = []string{
	"", "a", " ", "  ", "\n", "\r\n", " \n ", "\n\n\nx", "hello world", "  hello", "hello  ", "hello \n world",
	"I'm here, it's fine; we'LL see. THEY'RE 'sorry' 'Ve 'd 'x ''s", "don't", "'", "''", "'s", "' s", "'ſ", "'\u212a",
	"x = f(y) + 12345678;", "1234567 89", "v1.2.3-rc4", "$$$ !!!\n\n", " ?hello", "?hello", " !!", "\t1", "\tword",
	"e\u0301t\u00e9", "\u00a0word\u2003word\u3000", "\u0085x", "\u2028y\u2029", "٣٤٥٦ ⅻ ½¾", "東京タワー 🚀🚀 emoji👍🏽ok",
	"Ünïcödé — 東京 🚀 tabs\tand\nnewlines", "<|endoftext|> as text", "line1\r\nline2\r\n\r\n  indented\n\t\ttabs",
	"\xff\xfe bad \xc3 bytes \xe2\x82", "a\xffb", "\xff", "   \xff", "trailing spaces   ", "trailing newline \n",
	"mixed\u00a0\n\u00a0x", "=====\n-----\n", "http://example.com/path?q=1&r=2#frag", "CamelCaseWord snake_case_word",
	strings.Repeat("ab", 300), strings.Repeat(" ", 100) + "x", strings.Repeat("=", 500),
}

// TestLongEncodersMatchTiktoken holds each hand-written encoder to
// tiktoken-go's ids, and its count to their number. Single-goroutine work
// that -race slows several times: it runs without -race in make
// test-timing.
func TestLongEncodersMatchTiktoken(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	for name := range handWritten {
		t.Run(name, func(t *testing.T) { matchTiktoken(t, name) })
	}
}

func matchTiktoken(t *testing.T, name string) {
	truth, ours := tiktokenEncoding(t, name), handWrittenEncoder(t, name)
	check := func(s string) {
		t.Helper()
		want := truth.EncodeOrdinary(s)
		if got := ours.appendTokens(nil, s); !slices.Equal(got, want) {
			t.Fatalf("%q: ids %v, tiktoken-go %v", s, got, want)
		}
		if n := ours.count(s); n != len(want) {
			t.Fatalf("%q: count %d, tiktoken-go %d", s, n, len(want))
		}
	}
	for _, s := range trickyTexts {
		check(s)
	}
	// Random strings over an alphabet of every class the patterns tell
	// apart, and real text: the repo's test data.
	alphabet := []string{"a", "Z", "é", "ß", "東", "ſ", "\u0301", "\u0903", "ǅ", "ʰ", "ABC", "Abc", "1", "9", "٣", "½", "Ⅻ", " ", "  ", "\t", "\n", "\r", "\u00a0",
		"\u2003", "\u0085", "'", "'s", "'LL", "'re", "'d", "!", "?", ".", "-", "/", "🚀", "\xff", "\xc3", "_", "(", ")"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var sb strings.Builder
		for range 1 + rng.IntN(24) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		check(sb.String())
	}
	for _, dir := range []string{"testdata", "../datasets/testdata", "../replay/testdata"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil || len(b) > 1<<20 {
				continue
			}
			check(string(b))
		}
	}
}

// FuzzEncodersMatchTiktoken holds the hand-written encoders to
// tiktoken-go's on any input.
func FuzzEncodersMatchTiktoken(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	type pair struct {
		truth *tiktoken.Tiktoken
		ours  bpeEncoder
	}
	var encs []pair
	for name := range handWritten {
		encs = append(encs, pair{tiktokenEncoding(f, name), handWrittenEncoder(f, name)})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range encs {
			want := e.truth.EncodeOrdinary(s)
			if got := e.ours.appendTokens(nil, s); !slices.Equal(got, want) {
				t.Fatalf("%q (valid UTF-8 %v): ids %v, tiktoken-go %v", s, utf8.ValidString(s), got, want)
			}
		}
	})
}

// BenchmarkEncoders counts tokens of prose (the tricky texts) and of a
// 32k-token built prompt with each hand-written encoder and with
// tiktoken-go's, side by side.
func BenchmarkEncoders(b *testing.B) {
	for _, enc := range []string{CL100K, O200K, P50K} {
		truth, ours := tiktokenEncoding(b, enc), handWrittenEncoder(b, enc)
		pb := encodingBuilder(b, enc, 16)
		texts := map[string]string{"prose": strings.Join(trickyTexts[:len(trickyTexts)-3], " "), "prompt32k": pb.Build(32768, nil, 1)}
		for _, name := range []string{"prose", "prompt32k"} {
			text := texts[name]
			b.Run(enc+"/"+name+"/servetrace", func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					ours.count(text)
				}
			})
			b.Run(enc+"/"+name+"/tiktoken-go", func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					truth.EncodeOrdinary(text)
				}
			})
		}
	}
}
