// Package tokenize counts tokens with tiktoken encodings that ship inside the
// binary (nothing is downloaded at run time) and synthesizes prompts of an
// exact token count whose shared prefix blocks are byte-identical.
package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names servetrace understands.
const (
	CL100K = "cl100k_base"
	O200K  = "o200k_base"
	P50K   = "p50k_base"
)

// DefaultEncoding is used when no tokenizer is named.
const DefaultEncoding = CL100K

// Encodings lists the encodings bundled in the binary.
var Encodings = []string{CL100K, O200K, P50K}

// Tokenizer counts tokens. It is safe for concurrent use.
type Tokenizer struct {
	name    string
	bundled bool // one of Encodings, not a rank file
	// enc builds the encoding on its first call and returns the same
	// encoding, or error, after.
	enc func() (encoder, error)
}

// cache builds each encoding at most once per process: building one costs
// about 0.1–0.3 s. It is a lazily filled, read-only cache, not mutable state.
var cache = map[string]func() (encoder, error){}

// handWritten gives each bundled encoding its pre-tokenizer, written out
// by hand, and its ranks' file for the offline loader (it reads the
// bundled file of that base name).
var handWritten = map[string]struct {
	file  string
	piece func(text string, i int) int
}{
	CL100K: {"cl100k_base.tiktoken", cl100kPiece},
	O200K:  {"o200k_base.tiktoken", o200kPiece},
	P50K:   {"p50k_base.tiktoken", p50kPiece},
}

func init() {
	for _, name := range Encodings {
		hw := handWritten[name]
		cache[name] = sync.OnceValues(func() (encoder, error) {
			ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(hw.file)
			if err != nil {
				return nil, fmt.Errorf("tokenize: load %s: %w", name, err)
			}
			return bpeEncoder{ranks: ranks, piece: hw.piece}, nil
		})
	}
}

// Get returns the named tokenizer, built on first use and shared after.
func Get(name string) (*Tokenizer, error) {
	t, err := Lazy(name)
	if err != nil {
		return nil, err
	}
	if err := t.Load(); err != nil {
		return nil, err
	}
	return t, nil
}

// Lazy returns the named bundled tokenizer without building it: it is
// built on its first Count or Encode, or by Load. A prompt builder on it
// needs no build (its words are listed, see singleTokenWords), so a
// caller that may count nothing need not pay for the build.
func Lazy(name string) (*Tokenizer, error) {
	if name == "" {
		name = DefaultEncoding
	}
	f, ok := cache[name]
	if !ok {
		return nil, fmt.Errorf("unknown tokenizer %q; use one of: %s", name, strings.Join(Encodings, ", "))
	}
	return &Tokenizer{name: name, bundled: true, enc: f}, nil
}

// Load builds the encoding now, if it is not built yet.
func (t *Tokenizer) Load() error {
	_, err := t.enc()
	return err
}

// Name returns the encoding's name.
func (t *Tokenizer) Name() string { return t.name }

// Count returns the number of tokens in text, or -1 if the encoding could
// not be built. Special-token strings in text are counted as ordinary
// text.
func (t *Tokenizer) Count(text string) int {
	enc, err := t.enc()
	if err != nil {
		return -1
	}
	return enc.count(text)
}

// Encode returns the token ids of text, special-token strings as ordinary
// text. Ids never leave the process: they are not written anywhere. It
// panics if the encoding cannot be built: Get and Load report that first.
func (t *Tokenizer) Encode(text string) []int {
	enc, err := t.enc()
	if err != nil {
		panic(err)
	}
	return enc.appendTokens([]int{}, text) // as tiktoken-go: an empty text has no ids, not nil
}

// Open returns a bundled encoding by name, or builds one from a tiktoken
// rank file path with the given pattern (default Llama3Pattern).
func Open(name, pattern string) (*Tokenizer, error) {
	t, err := OpenLazy(name, pattern)
	if err != nil {
		return nil, err
	}
	if err := t.Load(); err != nil {
		return nil, err
	}
	return t, nil
}

// OpenLazy is Open with a bundled encoding not built yet (Lazy); a rank
// file is read and built at once, so that its errors name the file.
func OpenLazy(name, pattern string) (*Tokenizer, error) {
	if IsRankFile(name) {
		return LoadRankFile(name, pattern)
	}
	return Lazy(name)
}

// Known reports whether name is a bundled encoding.
func Known(name string) bool { return slices.Contains(Encodings, name) }
