package replay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// recordedServer answers the routes it has a file for under
// testdata/serverinfo/<engine> (route "/a/b" in a_b.json, or a_b.prom for
// Prometheus text: vLLM's /metrics, vllm/v1/metrics/loggers.py) and 404s every
// other, as a server of that engine would. The files are written by hand
// in each route's documented shape: vLLM api_server.py show_version and
// ModelCard; SGLang http_server.py server info and ModelCard; TGI
// router/src/lib.rs Info (v2.3+); Ollama docs/api.md (/api/version,
// POST /api/show); llama.cpp tools/server README (/props, /v1/models).
func recordedServer(t *testing.T, engine string) *httptest.Server {
	t.Helper()
	dir := filepath.Join("testdata", "serverinfo", engine)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.ReplaceAll(strings.Trim(r.URL.Path, "/"), "/", "_")
		kind := "application/json"
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			b, err = os.ReadFile(filepath.Join(dir, name+".prom"))
			kind = "text/plain; version=0.0.4"
		}
		if err != nil || (r.URL.Path == "/api/show") != (r.Method == http.MethodPost) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", kind)
		w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestFingerprintEachEngine: each engine is told from its own routes, and
// its version, weights and context length read from them.
func TestFingerprintEachEngine(t *testing.T) {
	for _, c := range []struct {
		engine             string
		want               trace.ServerIdentity
		detailKey, detailV string
	}{
		{"vllm", trace.ServerIdentity{Engine: "vllm", Version: "0.11.0", Model: "/models/Qwen2.5-7B-Instruct", ContextTokens: 32768}, "num_gpu_blocks", "18182"},
		{"sglang", trace.ServerIdentity{Engine: "sglang", Version: "0.5.4", Model: "Qwen/Qwen2.5-7B-Instruct", ContextTokens: 32768}, "tp_size", "2"},
		{"tgi", trace.ServerIdentity{Engine: "tgi", Version: "3.3.6-dev0", Model: "meta-llama/Llama-3.1-8B-Instruct", ContextTokens: 8192}, "max_input_tokens", "8191"},
		{"ollama", trace.ServerIdentity{Engine: "ollama", Version: "0.12.6", Model: "llama3.1:8b", ContextTokens: 131072}, "quantization_level", "Q4_K_M"},
		{"llamacpp", trace.ServerIdentity{Engine: "llama.cpp", Version: "b6950-4fea119", Model: "/models/qwen2.5-7b-instruct-q4_k_m.gguf", ContextTokens: 8192}, "total_slots", "4"},
		// /version alone is what imitators copy: not vLLM.
		{"imitator", trace.ServerIdentity{Engine: trace.NotRecorded, Version: trace.NotRecorded, Model: trace.NotRecorded}, "owned_by", "acme"},
	} {
		t.Run(c.engine, func(t *testing.T) {
			srv := recordedServer(t, c.engine)
			opts := DefaultOptions()
			opts.Target = srv.URL
			r, err := newRunner(opts)
			if err != nil {
				t.Fatal(err)
			}
			models, _ := r.modelsAnswer(context.Background())
			got := r.fingerprint(context.Background(), models)
			if got.Engine != c.want.Engine || got.Version != c.want.Version || got.Model != c.want.Model || got.ContextTokens != c.want.ContextTokens {
				t.Errorf("identity %+v, want %+v", *got, c.want)
			}
			if c.detailKey != "" && got.Details[c.detailKey] != c.detailV {
				t.Errorf("details %v, want %s=%s", got.Details, c.detailKey, c.detailV)
			}
			if len(got.Sources) == 0 || !strings.Contains(strings.Join(got.Sources, " "), "/v1/models") {
				t.Errorf("sources %v", got.Sources)
			}
		})
	}
}

// TestFingerprintSimulatorInRunJSON: a replay against the simulator
// records it as itself, with the client host, in run.json.
func TestFingerprintSimulatorInRunJSON(t *testing.T) {
	ri := simRun(t, 3, 10*time.Millisecond)
	if sv := ri.Server; sv == nil || sv.Engine != "servetrace-sim" || sv.Version != trace.ToolVersion || sv.ContextTokens <= 0 || sv.Details["preset"] == "" {
		t.Errorf("server %+v", sv)
	}
	if h := ri.Host; h == nil || h.Cores < 1 || h.OS == "" || h.CPUModel == "" || h.Kernel == "" {
		t.Errorf("host %+v", h)
	}
}
