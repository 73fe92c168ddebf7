package datasets

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// TestJSONTokens: the bound counts every bracket, colon, comma and
// backslash, inside strings too, since a string may hold JSON text that
// is decoded in its turn (escaped, even as \u002c).
func TestJSONTokens(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`0`, 0},
		{`{"a":[1,2,3]}`, 5},
		{`{"body":"{\"a\":[1,2]}"}`, 8},
		{`"[0\u002c0\u002c0]"`, 3},
		{`"prose, with commas: and colons"`, 2},
	} {
		if got, in := jsonTokens([]byte(c.in)), jsonTokensIn(c.in); got != c.want || in != c.want {
			t.Errorf("jsonTokens(%s) = %d, of the string %d; want %d", c.in, got, in, c.want)
		}
	}
}

// tinyObjects is a log line of n objects {"a":0} in a request's messages
// (3 tokens each, about 360 bytes each decoded into Go maps).
func tinyObjects(n int) io.Reader {
	return io.MultiReader(strings.NewReader(`{"request":{"messages":[`), &patternReader{pattern: []byte(`{"a":0},`), n: n}, strings.NewReader(`{}]}}`+"\n"))
}

// TestLongLogRecordDecodeIsBounded (issue 46, round 4, item 5, the class
// of map[string]any decoding): on 2 workers, within 512 MiB, a request
// log's line of 15 MiB of tiny objects (6M tokens) is rejected unread,
// and two lines of 0.9M tokens each (about 110 MB each decoded) are
// decoded, one at a time (TestDecodeBudgetHoldsItsTotal). Before, the
// 15 MiB line alone decoded to about 700 MB.
func TestLongLogRecordDecodeIsBounded(t *testing.T) {
	memcap.Run(t, 512<<20, func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		in := []io.Reader{tinyObjects(2_000_000)}
		for range 2 {
			in = append(in, tinyObjects(300_000))
		}
		var sink memSink
		st, err := Read(context.Background(), io.MultiReader(in...), Options{Name: "dense.jsonl", Format: FormatOpenAILog, Log: LogOptions{Salt: testSalt(t)}}, &sink)
		if err != nil || st.Rejects != 3 {
			t.Fatalf("%d rejects, error %v; want all 3 lines rejected", st.Rejects, err)
		}
		want := fmt.Sprintf("more than %d JSON tokens", maxDecodeTokens)
		if !strings.Contains(sink.rejects[0].Reason, want) {
			t.Errorf("line 1 rejected as %q; want %q", sink.rejects[0].Reason, want)
		}
		for _, r := range sink.rejects[1:] {
			if strings.Contains(r.Reason, "JSON tokens") {
				t.Errorf("line %d rejected as %q; it is within the bound, decoded, and rejected for its fields", r.Line, r.Reason)
			}
		}
	})
}

// TestDecodeBudgetHoldsItsTotal: however many take at once, the tokens
// taken never pass maxDecodeTokens, and a record of more is refused.
func TestDecodeBudgetHoldsItsTotal(t *testing.T) {
	b := newDecodeBudget()
	if _, err := b.take(maxDecodeTokens + 1); err != errTooManyTokens {
		t.Fatalf("a record over the budget: %v", err)
	}
	var mu sync.Mutex
	held, most := 0, 0
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			n := maxDecodeTokens / (2 + i%3)
			release, err := b.take(n)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			held += n
			most = max(most, held)
			mu.Unlock()
			runtime.Gosched()
			mu.Lock()
			held -= n
			mu.Unlock()
			release()
		})
	}
	wg.Wait()
	if most > maxDecodeTokens || held != 0 || b.used != 0 {
		t.Errorf("at most %d tokens held at once, %d left, %d used; want at most %d, then none", most, held, b.used, maxDecodeTokens)
	}
}

// TestLongBatchInputIndexIsBounded (item 5): a batch input line whose
// body is 15 MiB of empty objects is refused, naming the line, within
// 256 MiB; a body's values are never decoded to index a line. Before,
// the index decoded every body into a map, 5M objects of 62 bytes.
func TestLongBatchInputIndexIsBounded(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		in := io.MultiReader(strings.NewReader(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`+"\n"+`{"custom_id":"b","body":{"messages":[`),
			&patternReader{pattern: []byte(`{},`), n: 5_000_000}, strings.NewReader(`{}]}}`+"\n"))
		_, err := ReadBatchInput(context.Background(), in, "batch.jsonl")
		if err == nil || !strings.Contains(err.Error(), "batch.jsonl line 2") || !strings.Contains(err.Error(), "JSON tokens") {
			t.Fatalf("error %v; want line 2 refused for its JSON tokens", err)
		}
	})
}

// TestBatchInputIndexReadsOnlyItsKeys: indexing reads custom_id and
// whether body or response is there; a body must still be an object.
func TestBatchInputIndexReadsOnlyItsKeys(t *testing.T) {
	for _, c := range []struct {
		name, text, want string
	}{
		{"a body of any size", `{"custom_id":"a","body":{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"1":0,"2":0}}}`, ""},
		{"a body that is no object", `{"custom_id":"a","body":5}`, "line 1: malformed JSON (field body has the wrong type"},
		{"an output line", `{"custom_id":"a","response":{"body":{"choices":[]}}}`, "line 1: a Batch API output line"},
		{"a null body and a response", `{"custom_id":"a","body":null,"response":{}}`, "line 1: a Batch API output line"},
		{"a custom_id that is no string", `{"custom_id":7,"body":{}}`, "line 1: malformed JSON (field custom_id has the wrong type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bi, err := ReadBatchInput(context.Background(), strings.NewReader(c.text+"\n"), "b.jsonl")
			if c.want == "" {
				if err != nil || bi.Requests() != 1 {
					t.Fatalf("error %v; want one request", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want %q", err, c.want)
			}
		})
	}
}

// TestLongBatchInputRequestsAreBounded (item 5): a batch input of 5M
// tiny requests (150 MB) is refused at its millionth-and-first, naming
// the line, within 512 MiB: no provider's batch holds more than 100,000.
// Before, every one was indexed, a map entry each beside its line.
func TestLongBatchInputRequestsAreBounded(t *testing.T) {
	memcap.Run(t, 512<<20, func(t *testing.T) {
		lines := &countingJSONL{n: 5_000_000}
		_, err := ReadBatchInput(context.Background(), lines, "many.jsonl")
		want := fmt.Sprintf("many.jsonl line %d: more than %d requests", MaxBatchInputRequests+1, MaxBatchInputRequests)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v; want %q", err, want)
		}
	})
}

// countingJSONL is a batch input of n requests with custom_ids r1, r2...
type countingJSONL struct {
	n, i int
	buf  []byte
}

func (c *countingJSONL) Read(p []byte) (int, error) {
	for len(c.buf) < len(p) && c.i < c.n {
		c.i++
		c.buf = fmt.Appendf(c.buf, `{"custom_id":"r%d","body":{}}`+"\n", c.i)
	}
	if len(c.buf) == 0 {
		return 0, io.EOF
	}
	k := copy(p, c.buf)
	c.buf = c.buf[k:]
	return k, nil
}

// TestRecordsOfTooManyTokensAreRejected: each reader that decodes a
// record into Go maps or slices rejects one of more than maxDecodeTokens
// before decoding it, naming the line, and reads on.
func TestRecordsOfTooManyTokensAreRejected(t *testing.T) {
	many := "[" + strings.Repeat("0,", maxDecodeTokens) + "0]" // a JSON text of 2^20+1 values
	for _, c := range []struct {
		format, in string
		mapping    string
	}{
		{FormatOpenAILog, `{"request":{"messages":` + many + "}}\n" + `{"x":1}` + "\n", ""},
		{FormatCSV, "time,in,msgs\n" + `2025-03-01 10:00:00,5,"` + many + `"` + "\n" + "2025-03-01 10:00:01,5,\n", "ts: time\nprompt_tokens: in\nmessages: msgs\n"},
		{FormatShareGPT, `[{"id":"a","conversations":` + many + `},{"id":"b","conversations":[]}]`, ""},
	} {
		t.Run(c.format, func(t *testing.T) {
			opts := Options{Name: "many", Format: c.format, Log: LogOptions{Salt: testSalt(t)}}
			if c.mapping != "" {
				opts.Log.Mapping = mustMapping(t, c.mapping)
			}
			var sink memSink
			if _, err := Read(context.Background(), strings.NewReader(c.in), opts, &sink); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("more than %d JSON tokens", maxDecodeTokens)
			if len(sink.rows)+len(sink.rejects) != 2 || len(sink.rejects) == 0 || !strings.Contains(sink.rejects[0].Reason, want) ||
				len(sink.rejects) == 2 && strings.Contains(sink.rejects[1].Reason, want) {
				t.Fatalf("%d rows, rejects %+v; want the first record rejected for its JSON tokens, the second read", len(sink.rows), sink.rejects)
			}
		})
	}
}
