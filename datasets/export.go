package datasets

import (
	"bufio"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// ExportOptions controls Export.
type ExportOptions struct {
	// DenseIDs renumbers prefix block ids 0, 1, 2, ... in order of first
	// appearance, as Mooncake's traces are, through a map of at most
	// MaxDenseIDs ids (least recently seen evicted; an evicted id seen again
	// gets a new number, so sharing older than the map is lost).
	DenseIDs    bool
	MaxDenseIDs int
	// Tokenizer names the tokenizer whose token counts vllm-custom prompts
	// are built to (default cl100k_base); it should match the server's.
	Tokenizer string
}

// FormatVLLMCustom is the JSONL dataset `vllm bench serve --dataset-name
// custom` reads: one object per line with the prompt text and the output
// length to ask for. Prompts are synthetic text built to each row's input
// length, rows sharing prefix blocks sharing the same leading text.
const FormatVLLMCustom = "vllm-custom"

// DefaultMaxDenseIDs bounds the dense-id map (about 100 MB).
const DefaultMaxDenseIDs = 1 << 21

// ExportFormats are the formats Export writes.
var ExportFormats = []string{FormatAzure, FormatMooncake, FormatVLLMCustom, FormatOTLP}

// Export writes a bucket's rows in a public trace format: Azure LLM trace
// CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake JSONL
// (timestamp in ms from the bucket's anchor or first row, lengths,
// hash_ids). FormatOTLP exports a replay run instead, so bucketDir is then
// a run dir (ExportRunOTLP).
func Export(ctx context.Context, bucketDir string, w io.Writer, format string, o ExportOptions) (int64, error) {
	if format == FormatOTLP {
		return ExportRunOTLP(ctx, bucketDir, w)
	}
	b, err := trace.OpenBucket(bucketDir)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n int64
	var write func(*trace.Request) error
	switch format {
	case FormatAzure:
		// As the published Azure traces are: CRLF between lines, none after
		// the last, times in 100 ns ticks.
		if _, err := bw.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens"); err != nil {
			return 0, err
		}
		buf := make([]byte, 0, 64)
		write = func(r *trace.Request) error {
			buf = append(buf[:0], '\r', '\n')
			buf = r.Time().AppendFormat(buf, "2006-01-02 15:04:05.000000")
			buf = append(buf, '0', ',')
			buf = strconv.AppendInt(buf, r.InputTokens, 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, r.OutputTokens, 10)
			_, err := bw.Write(buf)
			return err
		}
	case FormatMooncake:
		anchor := int64(-1)
		if b.Manifest.TimesRelative && !b.Manifest.Anchor.IsZero() {
			anchor = b.Manifest.Anchor.UnixMicro()
		}
		dense := newDenseIDs(o)
		buf := make([]byte, 0, 1<<12)
		write = func(r *trace.Request) error {
			if anchor < 0 {
				anchor = r.TS
			}
			buf = append(buf[:0], `{"timestamp": `...)
			buf = strconv.AppendInt(buf, (r.TS-anchor)/int64(time.Millisecond/time.Microsecond), 10)
			buf = append(buf, `, "input_length": `...)
			buf = strconv.AppendInt(buf, r.InputTokens, 10)
			buf = append(buf, `, "output_length": `...)
			buf = strconv.AppendInt(buf, r.OutputTokens, 10)
			buf = append(buf, `, "hash_ids": [`...)
			for i, id := range r.PrefixBlocks {
				if i > 0 {
					buf = append(buf, ", "...)
				}
				buf = strconv.AppendInt(buf, dense.id(id), 10)
			}
			buf = append(buf, "]}\n"...)
			_, err := bw.Write(buf)
			return err
		}
	case FormatVLLMCustom:
		name := o.Tokenizer
		if name == "" {
			name = "cl100k_base"
		}
		tok, err := tokenize.Get(name)
		if err != nil {
			return 0, fmt.Errorf("export %s: %w", format, err)
		}
		bs := b.Manifest.BlockSize
		if bs <= 0 {
			bs = trace.DefaultBlockSize
		}
		pb, err := tokenize.NewPromptBuilder(tok, bs)
		if err != nil {
			return 0, fmt.Errorf("export %s: %w", format, err)
		}
		type line struct {
			Prompt       string `json:"prompt"`
			OutputTokens int64  `json:"output_tokens"`
		}
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		write = func(r *trace.Request) error {
			return enc.Encode(line{Prompt: pb.Build(int(r.InputTokens), r.PrefixBlocks, tokenize.SeedFor(r.RequestID)), OutputTokens: r.OutputTokens})
		}
	default:
		return 0, opterr.New("Format", format, "export writes %s", strings.Join(ExportFormats, ", "))
	}
	err = b.Scan(ctx, func(r *trace.Request) error {
		n++
		return write(r)
	})
	if err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// denseIDs renumbers ids by first appearance through a bounded LRU map.
type denseIDs struct {
	on    bool
	limit int
	next  int64
	ids   map[int64]*list.Element
	lru   *list.List // front: most recently seen; values are [2]int64{orig, dense}
}

func newDenseIDs(o ExportOptions) *denseIDs {
	if o.MaxDenseIDs <= 0 {
		o.MaxDenseIDs = DefaultMaxDenseIDs
	}
	return &denseIDs{on: o.DenseIDs, limit: o.MaxDenseIDs, ids: map[int64]*list.Element{}, lru: list.New()}
}

func (d *denseIDs) id(orig int64) int64 {
	if !d.on {
		return orig
	}
	if e, ok := d.ids[orig]; ok {
		d.lru.MoveToFront(e)
		return e.Value.([2]int64)[1]
	}
	if d.lru.Len() >= d.limit {
		old := d.lru.Back()
		d.lru.Remove(old)
		delete(d.ids, old.Value.([2]int64)[0])
	}
	v := d.next
	d.next++
	d.ids[orig] = d.lru.PushFront([2]int64{orig, v})
	return v
}
