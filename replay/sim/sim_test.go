package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/tokenize"
)

func start(t *testing.T, opts Options) *Running {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

func fast() Options {
	o := DefaultOptions()
	o.Engine.Cost = CostModel{IterBase: time.Millisecond}
	return o
}

// sseEvents reads an SSE body into its data payloads.
func sseEvents(t *testing.T, resp *http.Response) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestChatStreamShapeAndUsage(t *testing.T) {
	rs := start(t, fast())
	prompt := "the quick brown fox jumps over the lazy dog"
	tok, _ := tokenize.Get(tokenize.CL100K)
	want := tok.Count(prompt)
	resp := post(t, rs.URL+"/v1/chat/completions", `{"model":"servetrace-sim","messages":[{"role":"user","content":"`+prompt+`"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ev := sseEvents(t, resp)
	// role chunk, 5 content chunks, finish chunk, usage chunk, [DONE]
	if len(ev) != 9 || ev[8] != "[DONE]" {
		t.Fatalf("%d events: %v", len(ev), ev)
	}
	var content strings.Builder
	for i, e := range ev[:8] {
		var c struct {
			Choices []struct {
				Delta        map[string]any `json:"delta"`
				FinishReason *string        `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		switch {
		case i == 0:
			if c.Choices[0].Delta["role"] != "assistant" || c.Choices[0].Delta["content"] != "" {
				t.Errorf("first event is not a role-only chunk: %s", e)
			}
		case i <= 5:
			content.WriteString(c.Choices[0].Delta["content"].(string))
		case i == 6:
			if c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length" {
				t.Errorf("finish chunk: %s", e)
			}
		case i == 7:
			if len(c.Choices) != 0 || c.Usage == nil {
				t.Fatalf("usage chunk: %s", e)
			}
			u := c.Usage
			if u.PromptTokens != want || u.CompletionTokens != 5 {
				t.Errorf("usage %+v, want prompt %d completion 5", *u, want)
			}
		}
	}
	if got := tok.Count(content.String()); got != 5 {
		t.Errorf("streamed text has %d tokens, want 5", got)
	}
}

func TestCompletionsNonStream(t *testing.T) {
	rs := start(t, fast())
	resp := post(t, rs.URL+"/v1/completions", `{"model":"servetrace-sim","prompt":"hello world","max_tokens":3}`)
	var body struct {
		Choices []struct{ Text, FinishReason string } `json:"choices"`
		Usage   struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || body.Usage.PromptTokens != 2 || body.Usage.CompletionTokens != 3 || len(body.Choices) != 1 {
		t.Fatalf("status %d body %+v", resp.StatusCode, body)
	}
}

func TestErrorsAreJSONWithTheRightStatus(t *testing.T) {
	o := fast()
	o.MaxModelLen = 10
	rs := start(t, o)
	cases := []struct {
		name, path, body string
		status           int
	}{
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404},
		{"not JSON", "/v1/completions", `{"model":`, 400},
		{"messages as a string", "/v1/chat/completions", `{"model":"servetrace-sim","messages":"hi"}`, 400},
		{"no prompt", "/v1/completions", `{"model":"servetrace-sim"}`, 400},
		{"n=129", "/v1/completions", `{"model":"servetrace-sim","prompt":"x","n":129}`, 400},
		{"too long", "/v1/completions", `{"model":"servetrace-sim","prompt":"hello world","max_tokens":9}`, 400},
		{"max_tokens that overflows a sum", "/v1/completions", `{"model":"servetrace-sim","prompt":"hello world","max_tokens":9223372036854775807}`, 400},
		{"unknown route", "/v1/embeddings", `{}`, 404},
	}
	for _, c := range cases {
		resp := post(t, rs.URL+c.path, c.body)
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		err := json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != c.status || err != nil || e.Error.Message == "" {
			t.Errorf("%s: status %d (want %d), error message %q, decode %v", c.name, resp.StatusCode, c.status, e.Error.Message, err)
		}
	}
}

func TestInjectedFaults(t *testing.T) {
	o := fast()
	o.FailRate = 1
	rs := start(t, o)
	if resp := post(t, rs.URL+"/v1/completions", `{"model":"servetrace-sim","prompt":"x","max_tokens":2}`); resp.StatusCode != 500 {
		t.Errorf("fail rate 1: status %d, want 500", resp.StatusCode)
	}
	o.FailRate, o.StreamErrorRate = 0, 1
	rs = start(t, o)
	ev := sseEvents(t, post(t, rs.URL+"/v1/completions", `{"model":"servetrace-sim","prompt":"x","max_tokens":4,"stream":true}`))
	if len(ev) != 3 || !strings.Contains(ev[2], `"error"`) {
		t.Errorf("stream error rate 1: events %v, want 2 tokens then an error object", ev)
	}
}

func TestStartRefusesNonLoopback(t *testing.T) {
	s, _ := New(fast())
	if _, err := s.Start("0.0.0.0:0", false); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("err = %v, want ErrNotLoopback", err)
	}
}

func TestModelsAndHealth(t *testing.T) {
	o := fast()
	o.Models = []string{"a", "b"}
	rs := start(t, o)
	resp, err := http.Get(rs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&list)
	if len(list.Data) != 2 || list.Data[0].ID != "a" || list.Data[1].ID != "b" {
		t.Errorf("models %+v", list)
	}
	h, err := http.Get(rs.URL + "/health")
	if err != nil || h.StatusCode != 200 {
		t.Errorf("health: %v %v", h, err)
	}
	h.Body.Close()
}

func TestAppendJSONStringRoundTrips(t *testing.T) {
	for _, s := range []string{"", " plain", `quote " and \ backslash`, "tab\tnewline\ncr\r\x00\x1f", "ünï 東京 🚀", "</script>"} {
		var back string
		if err := json.Unmarshal(appendJSONString(nil, []byte(s)), &back); err != nil || back != s {
			t.Errorf("%q: encoded %s, decoded %q, %v", s, appendJSONString(nil, []byte(s)), back, err)
		}
	}
}
