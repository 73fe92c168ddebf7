package replay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/hashmix"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// answerServer answers "Hello" in pieces (and "Bye!" as a second choice,
// interleaved, when n is 2), streamed or whole, and 500 to a request
// whose id ends in "fail".
func answerServer(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	var body struct {
		Stream bool `json:"stream"`
		N      int  `json:"n"`
	}
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	if id := r.Header.Get("X-Request-Id"); len(id) >= 4 && id[len(id)-4:] == "fail" {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		return
	}
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if body.N == 2 {
		fmt.Fprint(w, `data: {"choices":[{"index":1,"delta":{"content":"By"}},{"index":0,"delta":{"content":"Hel"}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"lo"},"index":0}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[{"index":1,"delta":{"content":"e!"},"finish_reason":"stop"}]}`+"\n\n")
	} else {
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`+"\n\n")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestOutputHashes: each choice's answer is fingerprinted with the run's
// salt as HMAC-SHA256 computed here independently; a failed request has
// none, and another salt gives other fingerprints.
func TestOutputHashes(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(answerServer))
	defer ts.Close()
	var reqs []trace.Request
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		id     string
		stream bool
		n      int32
	}{{"two-choices", true, 2}, {"whole", false, 1}, {"streamed", true, 1}, {"must-fail", true, 1}, {"greedy", true, 1}, {"greedy-two", true, 2}} {
		r := trace.Request{Identity: trace.Identity{RequestID: c.id}, TS: t0.Add(time.Duration(i) * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: 8, OutputTokens: 2, MaxTokens: 2, API: trace.APIChat, Stream: c.stream, N: c.n}}
		if strings.HasPrefix(c.id, "greedy") {
			r.Temperature = new(0.0)
		}
		reqs = append(reqs, r)
	}
	dir := tracetest.WriteWorkload(t, reqs)
	key := "000102030405060708090a0b0c0d0e0f"
	want := func(key, text string) string {
		k, _ := hex.DecodeString(key)
		m := hmac.New(sha256.New, k)
		m.Write([]byte("servetrace output v1\x00" + text))
		return hex.EncodeToString(m.Sum(nil)[:16])
	}
	// The per-event chain, computed here from its definition: the key is
	// the salt's HMAC of the domain, each event folds in FNV-1a of its
	// text, and the top 32 bits are kept.
	wantEvents := func(key string, texts ...string) []int32 {
		k, _ := hex.DecodeString(key)
		m := hmac.New(sha256.New, k)
		m.Write([]byte("servetrace output events v1\x00"))
		ek := binary.LittleEndian.Uint64(m.Sum(nil))
		chain, out := ek, []int32(nil)
		for _, text := range texts {
			h := fnv.New64a()
			h.Write([]byte(text))
			chain = hashmix.Finalize(chain ^ hashmix.Finalize(h.Sum64()^ek))
			out = append(out, int32(chain>>32))
		}
		return out
	}
	events := map[string][]int32{}
	run := func(key string) map[string][]string {
		salt, err := anon.ParseSalt(key)
		if err != nil {
			t.Fatal(err)
		}
		opts := DefaultOptions()
		opts.Target, opts.OutputSalt = ts.URL, salt
		runDir := filepath.Join(t.TempDir(), "run")
		rows, _ := runAndRead(t, dir, runDir, opts)
		info, err := trace.ReadRunInfo(runDir)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Options.(map[string]any)["output_salt_fingerprint"]; got != salt.Fingerprint() {
			t.Errorf("run.json output_salt_fingerprint %v; want %s", got, salt.Fingerprint())
		}
		got := map[string][]string{}
		for _, r := range rows {
			got[r.RequestID], events[r.RequestID] = r.OutputHashes, r.OutputEventHashes
		}
		return got
	}
	got := run(key)
	for id, w := range map[string][]string{
		"two-choices": {want(key, "Hello"), want(key, "Bye!")},
		"whole":       {want(key, "Hello")},
		"streamed":    {want(key, "Hello")},
		"must-fail":   nil,
		"greedy":      {want(key, "Hello")},
	} {
		if !slices.Equal(got[id], w) {
			t.Errorf("%s: hashes %v; want %v", id, got[id], w)
		}
	}
	// Only a greedy answer of one choice keeps its per-event chain.
	if w := wantEvents(key, "Hel", "lo"); !slices.Equal(events["greedy"], w) {
		t.Errorf("greedy: event hashes %v; want %v", events["greedy"], w)
	}
	for _, id := range []string{"streamed", "greedy-two", "whole"} {
		if len(events[id]) != 0 {
			t.Errorf("%s: event hashes %v; want none", id, events[id])
		}
	}
	other := "ffeeddccbbaa99887766554433221100"
	if got := run(other); !slices.Equal(got["whole"], []string{want(other, "Hello")}) || got["whole"][0] == want(key, "Hello") {
		t.Errorf("under another salt: %v", got["whole"])
	}
}

// TestOutputHashesOfLongAnswers (issue 46 item 1): answers longer than
// answerChunk, in pieces of every size about it, are hashed as they come
// to the HMAC-SHA256 computed here over the whole text, and no choice's
// buffer grows past answerChunk.
func TestOutputHashesOfLongAnswers(t *testing.T) {
	salt, err := anon.ParseSalt("000102030405060708090a0b0c0d0e0f")
	if err != nil {
		t.Fatal(err)
	}
	pieces := []int{1, answerChunk - 1, 2, answerChunk, 5000, 3 * answerChunk, 7}
	h := newOutputHashes(salt.Keyed(outputDomain), 2)
	var whole [2][]byte
	for i, n := range pieces {
		for c := range 2 {
			text := []byte(strings.Repeat(string(rune('a'+i+c)), n))
			h.write(int32(c), text)
			whole[c] = append(whole[c], text...)
			if got := len(*h.bufs[c]); got > answerChunk {
				t.Fatalf("choice %d's buffer holds %d bytes; want at most %d", c, got, answerChunk)
			}
		}
	}
	k, _ := hex.DecodeString("000102030405060708090a0b0c0d0e0f")
	got := h.sums()
	for c := range 2 {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(outputDomain + "\x00"))
		m.Write(whole[c])
		if want := hex.EncodeToString(m.Sum(nil)[:16]); got[c] != want {
			t.Errorf("choice %d of %d bytes: %s; want %s", c, len(whole[c]), got[c], want)
		}
	}
}
