package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// FormatShareGPT is ShareGPT-style multi-turn conversations: a JSON array
// (or JSONL) of {"id", "conversations": [{"from": "human"|"gpt"|"system",
// "value": text}]}. Each human turn becomes a request whose prompt is the
// conversation so far (tokenized, never kept: counted and hashed into
// prefix blocks, so later turns share their history's blocks) and whose
// output is the reply's length. ShareGPT has no times: conversations are
// placed ShareGPTGap apart in file order, turns ShareGPTGap apart within
// one, and the manifest says so; fit and generate, or replay --rate, supply
// arrivals.
const FormatShareGPT = "sharegpt"

// ShareGPTGap spaces conversations and turns, which ShareGPT does not time.
const ShareGPTGap = time.Second

type shareGPTConversation struct {
	ID            json.RawMessage `json:"id"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

func readShareGPT(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	lo := opts.Log
	if err := lo.defaults(); err != nil {
		return Stats{}, err
	}
	st := Stats{TimesRelative: true, BlockSize: lo.BlockSize, PrefixSalted: true, Tokenizer: lo.Tokenizer.Name(), SyntheticTimes: true, Salt: lo.Salt}
	t := opts.Start.UnixMicro()
	n := int64(0)
	handle := func(raw []byte, record int64) error {
		var c shareGPTConversation
		reject := func(reason string) error {
			return st.reject(sink, opts.Name, record, reason)
		}
		if jsonTokens(raw) > maxDecodeTokens {
			return reject(errTooManyTokens.Error())
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return reject("malformed conversation: " + jsonReason(err))
		}
		if len(c.Conversations) == 0 {
			return reject("conversations: missing or empty")
		}
		rawID := string(c.ID)
		if rawID == "" {
			rawID = fmt.Sprintf("%s:%d", opts.Name, record)
		}
		session := lo.Salt.ID("session", rawID)
		var history []int
		turn := int32(0)
		for i, m := range c.Conversations {
			role := map[string]string{"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}[m.From]
			if role == "" {
				return reject(fmt.Sprintf("conversations: element %d has an unknown speaker", i))
			}
			history = append(history, lo.Tokenizer.Encode(message{role: role, text: m.Value}.render())...)
			if role != "user" {
				continue
			}
			out := int64(0)
			if i+1 < len(c.Conversations) && c.Conversations[i+1].From != "human" && c.Conversations[i+1].From != "user" {
				out = int64(lo.Tokenizer.Count(c.Conversations[i+1].Value))
			}
			req := trace.Request{
				Identity: trace.Identity{RequestID: lo.Salt.ID("request", fmt.Sprintf("%s#%d", rawID, i)), SessionID: session, Turn: turn, Model: opts.Model},
				TS:       t,
				Shape: trace.Shape{InputTokens: int64(len(history)), OutputTokens: out, MaxTokens: out, API: trace.APIChat, Stream: opts.Stream, N: 1,
					PrefixBlocks: lo.Salt.PrefixBlocks(history, lo.BlockSize)},
			}
			if err := st.accept(sink, opts.Name, record, &req); err != nil {
				return err
			}
			turn++
			t += ShareGPTGap.Microseconds()
		}
		if turn == 0 {
			return reject("conversations: no human turn")
		}
		return nil
	}
	first, err := peekLine(br)
	if err != nil {
		return st, fmt.Errorf("%s: %w", opts.Name, err)
	}
	if bytes.HasPrefix(bytes.TrimSpace(first), []byte("[")) {
		err := arrayElements(br, func(elem []byte, i int64, err error) error {
			if i&255 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			n = i
			if err != nil {
				return st.reject(sink, opts.Name, i, err.Error())
			}
			return handle(elem, i)
		})
		if err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			return st, fmt.Errorf("%s: %w", opts.Name, err)
		}
	} else {
		lines := lineReader{br: br}
		for {
			line, err := lines.next()
			if err == io.EOF {
				break
			}
			n++
			if errors.Is(err, errLineTooLong) {
				if err := st.reject(sink, opts.Name, n, err.Error()); err != nil {
					return st, err
				}
				continue
			}
			if err != nil {
				return st, fmt.Errorf("%s line %d: %w", opts.Name, n, err)
			}
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if err := handle(line, n); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}
