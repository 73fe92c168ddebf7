package tokenize

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func TestKnownCounts(t *testing.T) {
	// Reference counts from OpenAI's tiktoken for these strings.
	cases := []struct {
		enc, text string
		want      int
	}{
		{CL100K, "hello world", 2},
		{CL100K, "", 0},
		{CL100K, "<|endoftext|>", 7}, // special-token text counts as ordinary text
		{O200K, "hello world", 2},
	}
	for _, c := range cases {
		tok, err := Get(c.enc)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Count(c.text); got != c.want {
			t.Errorf("%s Count(%q) = %d, want %d", c.enc, c.text, got, c.want)
		}
	}
	if _, err := Get("llama-9"); err == nil || !strings.Contains(err.Error(), "cl100k_base") {
		t.Errorf("unknown tokenizer: %v", err)
	}
}

func TestBuildHasExactTokenCount(t *testing.T) {
	for _, enc := range []string{CL100K, O200K} {
		b := encodingBuilder(t, enc, 16)
		tok := b.Counter()
		for _, c := range []struct {
			tokens int
			blocks []int64
		}{
			{1, nil}, {15, nil}, {16, []int64{7}}, {17, []int64{7, 8}}, {100, []int64{1, 2, 3}},
			{513, nil}, {40, []int64{1, 2, 3}},
		} {
			text := b.Build(c.tokens, c.blocks, 42)
			if got := tok.Count(text); got != c.tokens {
				t.Errorf("%s: Build(%d, %v) has %d tokens", enc, c.tokens, c.blocks, got)
			}
		}
	}
}

func TestSharedBlocksShareText(t *testing.T) {
	tok, _ := Get(CL100K)
	b, _ := NewPromptBuilder(tok, 8)
	a := b.Build(20, []int64{5, 6, 7}, 1)
	c := b.Build(20, []int64{5, 6, 9}, 2)
	d := b.Build(12, []int64{5, 6}, 3) // same blocks, the second cut short
	wordsA, wordsC, wordsD := strings.Fields(a), strings.Fields(c), strings.Fields(d)
	if strings.Join(wordsA[:16], " ") != strings.Join(wordsC[:16], " ") {
		t.Error("requests with the same first two block ids differ within those blocks")
	}
	if strings.Join(wordsA[16:], " ") == strings.Join(wordsC[16:], " ") {
		t.Error("different third block ids produced the same text")
	}
	if strings.Join(wordsD, " ") != strings.Join(wordsA[:12], " ") {
		t.Error("a partial block is not a prefix of the same block in full")
	}
	if b.Build(20, nil, 1) == b.Build(20, nil, 2) {
		t.Error("distinct seeds produced the same unshared prompt")
	}
}

// TestSaltedPromptsAreOtherText: a salted builder's prompts share none of
// the unsalted one's text, block or seed, keep the shared blocks shared
// among themselves, and count the same tokens; salt 0 changes nothing.
func TestSaltedPromptsAreOtherText(t *testing.T) {
	tok, _ := Get(CL100K)
	b, _ := NewPromptBuilder(tok, 8)
	s := b.Salted(0x5a17)
	plain, salted := b.Build(24, []int64{5, 6}, 1), s.Build(24, []int64{5, 6}, 1)
	wp, ws := strings.Fields(plain), strings.Fields(salted)
	for _, part := range [][2]int{{0, 8}, {8, 16}, {16, 24}} { // two blocks, then the seed's words
		if strings.Join(wp[part[0]:part[1]], " ") == strings.Join(ws[part[0]:part[1]], " ") {
			t.Errorf("words %v: salted and unsalted prompts share their text", part)
		}
	}
	other := strings.Fields(s.Build(24, []int64{5, 7}, 2))
	if strings.Join(ws[:8], " ") != strings.Join(other[:8], " ") {
		t.Error("salted prompts with the same first block no longer share it")
	}
	if n := tok.Count(salted); n != 24 {
		t.Errorf("a salted prompt of 24 tokens counts %d", n)
	}
	if b.Salted(0).Build(24, []int64{5, 6}, 1) != plain {
		t.Error("salt 0 changed the text")
	}
}

func BenchmarkBuild4kTokens(b *testing.B) {
	tok, _ := Get(CL100K)
	pb, _ := NewPromptBuilder(tok, 512)
	blocks := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = pb.Build(4096, blocks, uint64(i))
	}
	b.ReportMetric(float64(4096*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkCount4kTokens(b *testing.B) {
	tok, _ := Get(CL100K)
	pb, _ := NewPromptBuilder(tok, 512)
	text := pb.Build(4096, nil, 1)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		_ = tok.Count(text)
	}
	b.ReportMetric(float64(4096*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// TestPromptRefusesImpossibleCounts: a count above MaxPromptTokens is an
// error, not a panic (makeslice at 10^18) or an exhausted memory (10^9).
func TestPromptRefusesImpossibleCounts(t *testing.T) {
	tok, err := Get(CL100K)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPromptBuilder(tok, 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{MaxPromptTokens + 1, 1e9, 1e12, 1e18, math.MaxInt64} {
		if s, err := b.Prompt(n, nil, 1); !errors.Is(err, ErrTooManyTokens) || s != "" {
			t.Errorf("Prompt(%d) = %d bytes, %v; want ErrTooManyTokens", n, len(s), err)
		}
	}
	if s, err := b.Prompt(-5, nil, 1); err != nil || s != "" {
		t.Errorf("Prompt(-5) = %q, %v; want an empty prompt", s, err)
	}
	if s, err := b.Prompt(3, []int64{1}, 1); err != nil || tok.Count(s) != 3 {
		t.Errorf("Prompt(3) = %q, %v", s, err)
	}
}

// TestTimingPromptBuildYields: on one processor, a goroutine that yields
// in a loop gets a turn at every yieldWords-th word of a 128k-token build,
// whether the prompt is drawn from its seed or from 512-token prefix
// blocks (a replay's send queued behind a long build would otherwise wait
// for all of it). Without the yields it gets a turn or two: the build is
// shorter than the runtime's 10 ms preemption. Under -race the slowed
// build is preempted anyway, so the check skips.
func TestTimingPromptBuildYields(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race the runtime preempts the slowed build whether or not it yields")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const tokens = 128 << 10
	blocks := make([]int64, tokens/512)
	for i := range blocks {
		blocks[i] = int64(i)
	}
	for _, tc := range []struct {
		name   string
		b      *PromptBuilder
		blocks []int64
	}{{"from the seed", cl100kBuilder(t, 64), nil}, {"from prefix blocks", cl100kBuilder(t, 512), blocks}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.Build(1000, nil, 1) // warm
			var done atomic.Bool
			turns := make(chan int)
			go func() {
				n := 0
				for !done.Load() {
					n++
					runtime.Gosched()
				}
				turns <- n
			}()
			runtime.Gosched() // the spinner starts and hands back
			tc.b.Build(tokens, tc.blocks, 2)
			done.Store(true)
			if n, want := <-turns, tokens/yieldWords-1; n < want {
				t.Errorf("a yielding goroutine got %d turns during the build, want at least %d", n, want)
			}
		})
	}
}

// TestPromptTextUnchanged: words drawn without math/rand/v2's Rand are
// the words Rand.IntN draws over the same stream, for several seeds and
// block mixes, so every prompt is byte for byte what it was. The lists
// cover IntN's multiply (cl100k_base's list) and its mask for a power of
// two (256 words); TestWordStreamRejects covers its rejection.
func TestPromptTextUnchanged(t *testing.T) {
	full := cl100kBuilder(t, 16)
	pow2, err := newPromptBuilder(full.tok, 16, full.words[:256])
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*PromptBuilder{full, pow2} {
		reference := func(n int, key, stream uint64) string {
			rng := rand.New(rand.NewPCG(key, stream))
			var sb strings.Builder
			for range n {
				sb.WriteString(" " + b.words[rng.IntN(len(b.words))])
			}
			return sb.String()
		}
		for _, tc := range []struct {
			tokens int
			blocks []int64
			seed   uint64
		}{{1, nil, 1}, {300, nil, 7}, {20000, nil, 99}, {40, []int64{5, 6}, 3}, {70, []int64{-1, 1 << 40}, 11}, {1500, nil, 5}} {
			want := ""
			written := 0
			for _, blk := range tc.blocks {
				n := min(16, tc.tokens-written)
				want += reference(n, uint64(blk), 0x9e3779b97f4a7c15)
				written += n
			}
			want += reference(tc.tokens-written, tc.seed, 0xc2b2ae3d27d4eb4f)
			if got := b.Build(tc.tokens, tc.blocks, tc.seed); got != want {
				t.Errorf("%d words, %d tokens, blocks %v, seed %d: the text changed", len(b.words), tc.tokens, tc.blocks, tc.seed)
			}
		}
		if got, want := b.Words(700, 9), reference(700, 9, 0x5851f42d4c957f2d); strings.Join(got, "") != want {
			t.Errorf("%d words: Words changed", len(b.words))
		}
	}
}

// TestWordStreamRejects: a product in Lemire's rejection zone draws
// again from the stream, as Rand.IntN does (a real draw lands there about
// once in 7·10^16 for cl100k_base's list, so the test widens the zone):
// finish alone after a rejected product gives IntN's next index, and a
// batch (draw, the state handed to finish and back) gives what
// math/rand/v2's PCG gives under Lemire's method with the wider zone.
func TestWordStreamRejects(t *testing.T) {
	b := cl100kBuilder(t, 16)
	for seed := range uint64(50) {
		ws := b.wordStream(seed, 3)
		want := rand.New(rand.NewPCG(seed, 3)).IntN(len(b.words)) // its first draw is out of the zone
		if got := ws.finish(0, 0); got != want {
			t.Errorf("seed %d: after a rejected draw, index %d, want %d", seed, got, want)
		}
	}
	const zone = 1 << 63 // about half the products rejected
	ws, src, m := b.wordStream(7, 3), rand.NewPCG(7, 3), uint64(len(b.words))
	ws.thresh = zone
	var idx [512]uint16
	ws.draw(idx[:])
	for j, w := range idx {
		hi, lo := bits.Mul64(src.Uint64(), m)
		for lo < zone {
			hi, lo = bits.Mul64(src.Uint64(), m)
		}
		if uint64(w) != hi {
			t.Fatalf("word %d: the batch drew %d, the PCG with the wider zone %d", j, w, hi)
		}
	}
}

// BenchmarkBuild128k builds a 128k-token prompt: a long-context replay's
// cost per request on the client.
func BenchmarkBuild128k(b *testing.B) {
	pb := cl100kBuilder(b, 64)
	seed := uint64(0)
	for b.Loop() {
		seed++
		pb.Build(128<<10, nil, seed)
	}
}

// cl100kBuilder is a PromptBuilder over cl100k_base with blocks of
// blockSize tokens.
func cl100kBuilder(tb testing.TB, blockSize int) *PromptBuilder {
	return encodingBuilder(tb, CL100K, blockSize)
}

// encodingBuilder is a PromptBuilder over the bundled encoding enc with
// blocks of blockSize tokens.
func encodingBuilder(tb testing.TB, enc string, blockSize int) *PromptBuilder {
	tb.Helper()
	tok, err := Get(enc)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := NewPromptBuilder(tok, blockSize)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestListedWordsAreCounted: the words listed for each bundled encoding
// are those its built tokenizer counts as one token each, so a builder on
// a Lazy tokenizer makes the same prompts as one that counted.
func TestListedWordsAreCounted(t *testing.T) {
	for _, name := range Encodings {
		tok, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		counted, err := CountSingleTokenWords(tok)
		if err != nil {
			t.Fatal(err)
		}
		listed, err := listedWords(tok)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(listed, counted) {
			t.Errorf("%s: listed words differ from the counted ones; run go generate ./tokenize", name)
		}
	}
}

// TestLazyTokenizerBuildsOnFirstCount: a prompt builder on a Lazy
// tokenizer does not build it; the first Count does.
func TestLazyTokenizerBuildsOnFirstCount(t *testing.T) {
	built := 0
	tok := &Tokenizer{name: CL100K, bundled: true, enc: func() (encoder, error) {
		built++
		return cache[CL100K]()
	}}
	b, err := NewPromptBuilder(tok, 16)
	if err != nil {
		t.Fatal(err)
	}
	text := b.Build(100, nil, 1)
	if built != 0 {
		t.Fatalf("the builder built the encoding %d times", built)
	}
	if n := tok.Count(text); n != 100 || built != 1 {
		t.Errorf("Count = %d after %d builds, want 100 after 1", n, built)
	}
}

// TestRankFileTokenizerCountsItsWords: a tokenizer from a rank file never
// uses a bundled encoding's list, whatever its name.
func TestRankFileTokenizerCountsItsWords(t *testing.T) {
	tok := &Tokenizer{name: CL100K, enc: cache[CL100K]}
	if words, err := listedWords(tok); words != nil || err != nil {
		t.Errorf("listed %d words (err %v) for a tokenizer not bundled", len(words), err)
	}
}
