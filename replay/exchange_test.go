package replay

import "testing"

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
