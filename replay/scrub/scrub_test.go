package scrub

import (
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestScrubError(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"The quick brown fox jumps over the lazy dog near the riverbank"}],"max_tokens":"ten"}`)
	s := New("sk-live-4f9a8b7c6d", "tok", "hdr-XY-77q1")
	key := "sk-live-4f9a8b7c6d"
	b64 := func(enc *base64.Encoding, s string) string { return enc.EncodeToString([]byte(s)) }
	tests := []struct {
		name, msg, want string
	}{
		{"plain message kept", "HTTP 429: rate limit reached, retry later", "HTTP 429: rate limit reached, retry later"},
		{"short field names and values kept", `HTTP 400: max_tokens must be an integer, got "ten"`, `HTTP 400: max_tokens must be an integer, got "ten"`},
		{"echoed input removed", "HTTP 422: [{'loc': ('body',), 'input': {'content': 'The quick brown fox jumps over the lazy dog near the riverbank'}}]",
			"HTTP 422: [{'loc': ('body',), 'input': {'content': '<request text>'}}]"},
		{"whole key removed", "HTTP 401: Incorrect API key provided: sk-live-4f9a8b7c6d.", "HTTP 401: Incorrect API key provided: <redacted>."},
		{"quoted part of a key removed", "HTTP 401: key sk-live-4f**** refused", "HTTP 401: key <redacted>**** refused"},
		{"four bytes of a long key removed", "HTTP 401: key ending 7c6d refused", "HTTP 401: key ending <redacted> refused"},
		{"a short secret inside a word is left", "bad token", "bad token"},
		{"a short secret as a word is removed", "bad token tok.", "bad token <redacted>."},
		{"base64 of the key removed", "auth " + b64(base64.StdEncoding, key) + " refused", "auth <redacted> refused"},
		{"base64 of user:key removed", "Basic " + b64(base64.StdEncoding, "bob:"+key), "Basic <redacted>"},
		{"unpadded URL-alphabet base64 at another alignment removed", "x=" + b64(base64.RawURLEncoding, "ab"+key+"?>"), "x=<redacted>"},
		{"spaced-out key removed", "key: s k - l i v e - 4 f 9 a 8 b 7 c 6 d!", "key: <redacted>!"},
		{"key with dots between removed", "k=s.k.-.l.i.v.e.-.4.f.9.a", "k=<redacted>"},
		{"spaced-out short header value removed", "h = h d r X Y 7 7 q 1", "h = <redacted>"},
		{"URL credentials and query values redacted", `Post "http://bob:pw@host:1/v1?api_key=abc&v=2": EOF`, `Post "http://REDACTED@host:1/v1?api_key=REDACTED&v=REDACTED": EOF`},
		{"ordinary base64 kept", "id Y2hhdGNtcGwtMTIzNDU2", "id Y2hhdGNtcGwtMTIzNDU2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Message(tc.msg, body, s); got != tc.want {
				t.Errorf("Message(%q)\n got %q\nwant %q", tc.msg, got, tc.want)
			}
		})
	}
	// A cut through a multi-byte character leaves valid UTF-8.
	got := Message("é"+"quick brown fox jumps", []byte("\xa9quick brown fox jumps"), nil)
	if !utf8.ValidString(got) || !strings.Contains(got, "<request text>") {
		t.Errorf("multi-byte boundary: %q", got)
	}
}

// TestScrubEveryAlignment: the key base64-encoded after 0 to 5 other
// bytes, in both alphabets, padded or not, is removed.
func TestScrubEveryAlignment(t *testing.T) {
	const key = "sk-proj-Zq81xPlm04"
	s := New(key)
	for pre := range 6 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			text := "v " + enc.EncodeToString([]byte(strings.Repeat("\xfb", pre)+key+"\xff\xfe")) + " end"
			if got := s.Scrub(text); got != "v <redacted> end" {
				t.Errorf("prefix %d: Scrub(%q) = %q", pre, text, got)
			}
		}
	}
}

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"https://user:pw@host:8443/base?api-key=k&x=1#frag", "https://REDACTED@host:8443/base?api-key=REDACTED&x=REDACTED#REDACTED"},
		{"http://user:p@ss/w@host/p", "http://REDACTED@host/p"},
		{"http://h/?sk-123", "http://h/?REDACTED"},
		{"user:pass@host:8000", "REDACTED@host:8000"},
		{"http://us er:pa ss@host", "http://REDACTED@host"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRedactCopiesLeavesNoCopy: whatever the message quotes of the body, no
// minCopiedText-byte window of the scrubbed message (labels aside) is in
// the body.
func TestRedactCopiesLeavesNoCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the of and to in is was for on that with as by at from his her be are it an")
	gen := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(" " + words[rng.IntN(len(words))])
		}
		return b.String()
	}
	for k := range 500 {
		body := gen(300 + rng.IntN(3000))
		a := rng.IntN(len(body) - 120)
		msg := "HTTP 400: " + gen(40) + " input '" + body[a:a+10+rng.IntN(100)] + "' and " + body[a+3:a+40] + gen(30)
		got := redactCopies(msg, []byte(body), minCopiedText, requestLabel)
		for _, part := range strings.Split(got, requestLabel) {
			for i := 0; i+minCopiedText <= len(part); i++ {
				if strings.Contains(body, part[i:i+minCopiedText]) {
					t.Fatalf("case %d: %q keeps %q of the body", k, got, part[i:i+minCopiedText])
				}
			}
		}
	}
}

// TestScrubKeepsNumbers: a key's few digits are not hunted in numbers,
// whose text (metrics, counts) must survive, raw or with separators.
func TestScrubKeepsNumbers(t *testing.T) {
	s := New("sk-proj-abcdefgh12345678", "Zq8x5")
	for _, text := range []string{
		`vllm:request_prompt_tokens_bucket{le="1234"} 5678`, "served 12,345 of 345678 tokens",
	} {
		if got := s.Scrub(text); got != text {
			t.Errorf("Scrub(%q) = %q", text, got)
		}
	}
	for text, want := range map[string]string{
		"key 1234567 abcdefgh": "key 1234567 <redacted>", // seven digits are kept, letters are not
		"tail efgh12345678.":   "tail <redacted>.",
		"b64 " + base64.StdEncoding.EncodeToString([]byte("x:Zq8x5")): "b64 <redacted>",
	} {
		if got := s.Scrub(text); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestScrubKeepsNamesAroundShortSecrets (issue 46 item 12): a short
// secret (a header value of "3") is removed where it stands as a value of
// its own, not from inside a name or version it is glued into with - or .
// (run.json's server details read "llama-<redacted>.1-8b-h100").
func TestScrubKeepsNamesAroundShortSecrets(t *testing.T) {
	s := New("3", "ab")
	for _, text := range []string{"llama-3.1-8b-h100", "v0.3.1", "lora-ab-2", "ab.c"} {
		if got := s.Scrub(text); got != text {
			t.Errorf("Scrub(%q) = %q; want it kept", text, got)
		}
	}
	for text, want := range map[string]string{
		`{"org": "3"}`:     `{"org": "<redacted>"}`,
		"X-Org: 3\n":       "X-Org: <redacted>\n",
		"token=ab&x=1":     "token=<redacted>&x=1",
		"tenant (ab) kept": "tenant (<redacted>) kept",
	} {
		if got := s.Scrub(text); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", text, got, want)
		}
	}
}
