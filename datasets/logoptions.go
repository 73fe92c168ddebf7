package datasets

import (
	"time"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace/anon"
)

// LogOptions controls how request logs are anonymised.
type LogOptions struct {
	// Mapping names where each field is (default: the openai preset).
	Mapping *Mapping
	// Salt keys every id and hash (anon.LoadSalt).
	Salt anon.Salt
	// Tokenizer counts tokens where usage is missing and tokenizes prompts
	// for prefix blocks.
	Tokenizer *tokenize.Tokenizer
	// BlockSize is the prefix block size in tokens (default 512).
	BlockSize int
	// SessionIdle ends an inferred session after this long without a turn
	// (default 30 minutes), counted from its latest request's end, an end
	// counting at most an hour past that request's arrival; it bounds the
	// memory sessions take.
	SessionIdle time.Duration
	// HashNames replaces model and adapter names by HMACs.
	HashNames bool
	// MaxDisorder is how far (back in time) a row may be from the latest
	// seen before it is rejected as out of order (default 1 hour).
	MaxDisorder time.Duration
	// BatchInput, when set, is joined to each record of an OpenAI Batch
	// API output input (FormatOpenAIBatch) by its custom_id, under
	// batch_input: the request side the output lacks (LoadBatchInput).
	BatchInput *BatchInput
	// skipFailedBatch skips, and counts in a note, the Batch API output
	// lines of requests that failed (set by Read for FormatOpenAIBatch).
	skipFailedBatch bool
}

// defaults fills every unset option: the openai mapping, 512-token blocks,
// a 30-minute session idle, an hour of disorder, cl100k_base and a random
// salt.
func (o *LogOptions) defaults() error {
	if o.Mapping == nil {
		m, err := LoadMapping("openai")
		if err != nil {
			return err
		}
		o.Mapping = m
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 512
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = 30 * time.Minute
	}
	if o.MaxDisorder <= 0 {
		o.MaxDisorder = time.Hour
	}
	if o.Tokenizer == nil {
		t, err := tokenize.Get("cl100k_base")
		if err != nil {
			return err
		}
		o.Tokenizer = t
	}
	if o.Salt.IsZero() {
		o.Salt = anon.RandomSalt()
	}
	return nil
}
