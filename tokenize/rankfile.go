package tokenize

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/pkoukk/tiktoken-go"

	"github.com/servetrace/servetrace/internal/regfile"
)

// Llama3Pattern is the pre-tokenizer pattern of Llama 3's tiktoken-format
// tokenizer (the same as cl100k_base's); it is the default for rank files.
const Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// IsRankFile reports whether a --tokenizer value names a rank file rather
// than a bundled encoding.
func IsRankFile(name string) bool {
	return !Known(name) && (strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".tiktoken") || strings.HasSuffix(name, ".model"))
}

// maxRankFileBytes bounds a rank file: the largest vocabularies in use
// (o200k_base, Llama 3's) take 2–4 MiB.
const maxRankFileBytes = 64 << 20

// LoadRankFile builds a tokenizer from a tiktoken-format rank file (one
// "base64-token rank" pair per line, as Llama 3's tokenizer.model) with the
// given pre-tokenizer pattern (default Llama3Pattern). Special tokens
// <|begin_of_text|> and <|end_of_text|> take the two ids after the ranks;
// they do not affect counts, which treat special-token text as ordinary.
func LoadRankFile(path, pattern string) (*Tokenizer, error) {
	if pattern == "" {
		pattern = Llama3Pattern
	}
	b, err := regfile.ReadFile(path, maxRankFileBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer rank file: %w", err)
	}
	ranks := make(map[string]int, bytes.Count(b, []byte("\n"))+1)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	maxRank := -1
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		tok, rankStr, ok := strings.Cut(text, " ")
		if !ok {
			return nil, fmt.Errorf("tokenizer rank file %s line %d: want \"base64-token rank\"", path, line)
		}
		raw, err := base64.StdEncoding.DecodeString(tok)
		if err != nil {
			return nil, fmt.Errorf("tokenizer rank file %s line %d: token is not base64: %v", path, line, err)
		}
		rank, err := strconv.Atoi(strings.TrimSpace(rankStr))
		if err != nil || rank < 0 {
			return nil, fmt.Errorf("tokenizer rank file %s line %d: rank is not a non-negative integer", path, line)
		}
		ranks[string(raw)] = rank
		maxRank = max(maxRank, rank)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer rank file %s: %w", path, err)
	}
	if len(ranks) < 256 {
		return nil, fmt.Errorf("tokenizer rank file %s has %d tokens; a byte-level BPE needs at least the 256 byte tokens", path, len(ranks))
	}
	var enc encoder
	if pattern == Llama3Pattern {
		// Written out by hand: tiktoken-go's encoding, built only to be
		// dropped, would sort every token and invert the ranks.
		if r, ok := sharedRank(ranks); ok {
			return nil, fmt.Errorf("tokenizer rank file %s: two tokens have rank %d; each rank names one token", path, r)
		}
		enc = bpeEncoder{ranks: ranks, piece: cl100kPiece}
	} else {
		special := map[string]int{"<|begin_of_text|>": maxRank + 1, "<|end_of_text|>": maxRank + 2}
		tk, err := newTiktoken(ranks, special, pattern, path)
		if err != nil {
			return nil, fmt.Errorf("tokenizer rank file %s: %w", path, err)
		}
		enc = regexpEncoder{tk}
	}
	return &Tokenizer{name: path, enc: func() (encoder, error) { return enc, nil }}, nil
}

// sharedRank returns a rank two tokens share, which tiktoken-go refuses
// (its ids would not decode), and whether there is one.
func sharedRank(ranks map[string]int) (int, bool) {
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if seen[r] {
			return r, true
		}
		seen[r] = true
	}
	return 0, false
}

// newTiktoken wraps the library constructors, which can panic on a bad pattern.
func newTiktoken(ranks, special map[string]int, pattern, name string) (t *tiktoken.Tiktoken, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bad tokenizer: %v", r)
		}
	}()
	bpe, err := tiktoken.NewCoreBPE(ranks, special, pattern)
	if err != nil {
		return nil, fmt.Errorf("pattern: %w", err)
	}
	set := map[string]any{}
	for k := range special {
		set[k] = true
	}
	return tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{Name: name, PatStr: pattern, MergeableRanks: ranks, SpecialTokens: special}, set), nil
}
