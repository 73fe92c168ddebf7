package replay

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestScrubError(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"The quick brown fox jumps over the lazy dog near the riverbank"}],"max_tokens":"ten"}`)
	secrets := []string{"sk-live-4f9a8b7c6d", "tok"}
	tests := []struct {
		name, msg, want string
	}{
		{"plain message kept", "HTTP 429: rate limit reached, retry later", "HTTP 429: rate limit reached, retry later"},
		{"short field names and values kept", `HTTP 400: max_tokens must be an integer, got "ten"`, `HTTP 400: max_tokens must be an integer, got "ten"`},
		{"echoed input removed", "HTTP 422: [{'loc': ('body',), 'input': {'content': 'The quick brown fox jumps over the lazy dog near the riverbank'}}]",
			"HTTP 422: [{'loc': ('body',), 'input': {'content': '<request text>'}}]"},
		{"whole key removed", "HTTP 401: Incorrect API key provided: sk-live-4f9a8b7c6d.", "HTTP 401: Incorrect API key provided: <redacted>."},
		{"quoted part of a key removed", "HTTP 401: key sk-live-4f**** refused", "HTTP 401: key <redacted>**** refused"},
		{"a secret too short to tell from words is left", "bad token tok", "bad token tok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := scrubError(tc.msg, body, secrets); got != tc.want {
				t.Errorf("scrubError(%q)\n got %q\nwant %q", tc.msg, got, tc.want)
			}
		})
	}
	// A cut through a multi-byte character leaves valid UTF-8.
	got := scrubError("é"+"quick brown fox jumps", []byte("\xa9quick brown fox jumps"), nil)
	if !utf8.ValidString(got) || !strings.Contains(got, "<request text>") {
		t.Errorf("multi-byte boundary: %q", got)
	}
}

// TestErrorMessageShapes: the message is found in each error shape servers
// answer with.
func TestErrorMessageShapes(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"error":{"message":"model not found","type":"invalid_request_error"}}`, "model not found"},                          // OpenAI, Ollama, new vLLM
		{`{"object":"error","message":"prompt too long","type":"BadRequestError","param":null,"code":400}`, "prompt too long"}, // older vLLM, Ray Serve
		{`{"detail":"Not authenticated"}`, "Not authenticated"},                                                                // FastAPI
		{`{"detail":[{"loc":["body","max_tokens"],"msg":"bad"}]}`, `[{"loc":["body","max_tokens"],"msg":"bad"}]`},
		{`{"error":"overloaded"}`, "overloaded"},
		{`not json`, ""},
		{`{"id":"x"}`, ""},
	} {
		if got := errorMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("errorMessage(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
