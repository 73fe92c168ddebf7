package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/promtext"
	"github.com/servetrace/servetrace/internal/servermetrics"
	"github.com/servetrace/servetrace/trace"
)

// infoRoutes are the GET routes by which servers say what they are, each
// unique to one engine (shapes: vLLM vllm/entrypoints/openai/api_server.py
// show_version; SGLang python/sglang/srt/entrypoints/http_server.py,
// renamed /get_server_info → /server_info in 2026; TGI router/src/lib.rs
// Info; Ollama server/routes.go; llama.cpp tools/server props).
var infoRoutes = []string{"/version", "/info", "/api/version", "/props", "/server_info", "/get_server_info"}

// maxInfoBytes bounds one info answer (SGLang's server info is a few
// hundred kB with many data-parallel ranks).
const maxInfoBytes = 4 << 20

// fingerprint asks the server's info routes what it is, each with a
// short timeout, and identifies it from the answers with models (the
// /v1/models answer already fetched). Routes that fail are skipped:
// nothing here may fail a run.
func (r *Runner) fingerprint(ctx context.Context, models any) *trace.ServerIdentity {
	answers := map[string][]byte{}
	for _, route := range infoRoutes {
		if b, ok := r.getInfo(ctx, http.MethodGet, route, nil); ok {
			answers[route] = b
		}
	}
	if b, err := json.Marshal(models); err == nil && models != trace.NotRecorded {
		answers["/v1/models"] = b
	}
	id := identify(answers)
	if id.Engine == "vllm" {
		addCacheConfig(&id, r.metricsText(ctx))
	}
	if id.Engine == "ollama" && id.Model != trace.NotRecorded {
		body, _ := json.Marshal(map[string]string{"model": id.Model})
		if b, ok := r.getInfo(ctx, http.MethodPost, "/api/show", body); ok {
			addOllamaShow(&id, b)
		}
	}
	return &id
}

// getInfo fetches one info route; ok only for a 200 JSON answer.
func (r *Runner) getInfo(ctx context.Context, method, route string, body []byte) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.opts.endpoint(route), bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	r.setHeaders(req)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoBytes))
	if err != nil || resp.StatusCode != http.StatusOK || !json.Valid(b) {
		return nil, false
	}
	return []byte(r.scrub.Scrub(string(b))), true
}

// metricsText fetches the server's Prometheus text (the first engine
// endpoint of Metrics, else the target's /metrics, where vLLM serves it),
// or "".
func (r *Runner) metricsText(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	u := r.opts.endpoint("/metrics")
	if eps := r.opts.metricsOf(RoleEngine); len(eps) > 0 {
		u = eps[0].URL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ""
	}
	// The API key and headers go to the target's origin only: a metrics
	// URL elsewhere (a sidecar, a Prometheus) is no party to them, and the
	// scrapes send none either.
	if target, err := url.Parse(r.opts.Target); err == nil && origin(target) == origin(req.URL) {
		r.setHeaders(req)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoBytes))
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return r.scrub.Scrub(string(b))
}

// cacheConfigLabels are the labels of vLLM's vllm:cache_config_info kept
// in a fingerprint: those every version since 2024 writes (the metric's
// labels are the whole CacheConfig, which changes with each version).
var cacheConfigLabels = []string{"block_size", "cache_dtype", "gpu_memory_utilization", "num_gpu_blocks", "enable_prefix_caching", "sliding_window"}

// addCacheConfig adds the KV cache settings vLLM states in its
// vllm:cache_config_info gauge (vllm/v1/metrics/loggers.py
// log_metrics_info) to a vLLM identity.
func addCacheConfig(id *trace.ServerIdentity, text string) {
	found := false
	promtext.Scan(text, func(s promtext.Sample) {
		if found || servermetrics.KindOf(s.Name) != servermetrics.CacheConfig {
			return
		}
		found = true
		for _, k := range cacheConfigLabels {
			if v, ok := s.Label(k); ok && v != "" && v != "None" {
				if id.Details == nil {
					id.Details = map[string]string{}
				}
				id.Details[k] = cleanString(v, maxRecordedString)
			}
		}
		id.Sources = uniqueSorted(append(id.Sources, "GET /metrics (vllm:cache_config_info)"))
	}, nil)
}

// identify tells the engine from the info routes' answers (by route) and
// reads its version, weights, context length and settings. Each engine is
// told by what only it says: TGI's router name, SGLang's internal_states,
// llama.cpp's default_generation_settings and total_slots, Ollama's
// /api/version, vLLM's /version beside owned_by "vllm" in /v1/models (a
// bare /version is copied by imitators).
func identify(answers map[string][]byte) trace.ServerIdentity {
	id := trace.ServerIdentity{Engine: trace.NotRecorded, Version: trace.NotRecorded, Model: trace.NotRecorded}
	parsed := map[string]map[string]any{}
	for _, route := range infoRoutes {
		var m map[string]any
		if json.Unmarshal(answers[route], &m) == nil && m != nil {
			parsed[route] = m
		}
	}
	// obj is a route's parsed answer (nil when it gave none); the routes
	// an identification reads are its sources.
	obj := func(route string) map[string]any {
		m := parsed[route]
		if m != nil {
			id.Sources = append(id.Sources, "GET "+route)
		}
		return m
	}
	card := firstModelCard(answers["/v1/models"])
	owned := str(card["owned_by"])
	switch {
	case str(obj("/info")["router"]) == "text-generation-router":
		info := obj("/info")
		id.Engine, id.Version, id.Model = "tgi", orNot(str(info["version"])), orNot(str(info["model_id"]))
		id.ContextTokens = num(info["max_total_tokens"])
		id.Details = details(info, "model_sha", "model_dtype", "model_device_type", "max_input_tokens", "max_input_length", "max_concurrent_requests", "max_batch_total_tokens", "sha", "docker_label")
	case sglangInfo(obj("/server_info")) != nil || sglangInfo(obj("/get_server_info")) != nil:
		info := sglangInfo(obj("/server_info"))
		if info == nil {
			info = sglangInfo(obj("/get_server_info"))
		}
		id.Engine, id.Version, id.Model = "sglang", orNot(str(info["version"])), orNot(str(info["model_path"]))
		id.ContextTokens = num(card["max_model_len"])
		id.Details = details(info, "tp_size", "dp_size", "pp_size", "ep_size", "dtype", "kv_cache_dtype", "quantization", "mem_fraction_static",
			"chunked_prefill_size", "max_running_requests", "max_total_num_tokens", "max_req_input_len", "page_size", "attention_backend", "context_length")
	case obj("/props")["default_generation_settings"] != nil && obj("/props")["total_slots"] != nil:
		props := obj("/props")
		id.Engine, id.Version, id.Model = "llama.cpp", orNot(str(props["build_info"])), orNot(str(props["model_path"]))
		if g, ok := props["default_generation_settings"].(map[string]any); ok {
			id.ContextTokens = num(g["n_ctx"]) // per slot
		}
		id.Details = details(props, "total_slots", "model_alias", "model_ftype")
	case onlyKey(obj("/api/version"), "version") && owned != "vllm" && owned != "sglang":
		id.Engine, id.Version = "ollama", orNot(str(obj("/api/version")["version"]))
		id.Model = orNot(str(card["id"]))
	case owned == "vllm":
		id.Engine, id.Model = "vllm", orNot(str(card["root"]))
		if v := obj("/version"); onlyKey(v, "version") {
			id.Version = orNot(str(v["version"]))
		}
		id.ContextTokens = num(card["max_model_len"])
	case str(obj("/version")["engine"]) == "servetrace-sim":
		v := obj("/version")
		id.Engine, id.Version, id.Model = "servetrace-sim", orNot(str(v["version"])), orNot(str(card["id"]))
		id.ContextTokens = num(card["max_model_len"])
		id.Details = details(v, "preset")
	}
	if owned != "" && !strings.HasPrefix(id.Engine, owned) && id.Engine == trace.NotRecorded {
		id.Details = map[string]string{"owned_by": owned}
	}
	if card != nil {
		id.Sources = append(id.Sources, "GET /v1/models")
	}
	id.Sources = uniqueSorted(id.Sources)
	return id
}

// addOllamaShow adds what Ollama's POST /api/show says of the model: its
// details and its trained context length (model_info's
// <architecture>.context_length).
func addOllamaShow(id *trace.ServerIdentity, b []byte) {
	var show struct {
		Details   map[string]any `json:"details"`
		ModelInfo map[string]any `json:"model_info"`
	}
	if json.Unmarshal(b, &show) != nil {
		return
	}
	id.Sources = uniqueSorted(append(id.Sources, "POST /api/show"))
	id.Details = details(show.Details, "family", "parameter_size", "quantization_level", "format")
	if arch := str(show.ModelInfo["general.architecture"]); arch != "" {
		id.ContextTokens = num(show.ModelInfo[arch+".context_length"])
	}
}

// sglangInfo returns an SGLang server info answer, or nil for another's:
// it holds internal_states beside model_path.
func sglangInfo(m map[string]any) map[string]any {
	if _, ok := m["internal_states"].([]any); ok && m["model_path"] != nil {
		return m
	}
	return nil
}

// firstModelCard returns the first entry of a /v1/models answer.
func firstModelCard(b []byte) map[string]any {
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if json.Unmarshal(b, &list) != nil || len(list.Data) == 0 {
		return nil
	}
	return list.Data[0]
}

// details picks the named fields a server stated, as text.
func details(m map[string]any, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		switch v := m[k].(type) {
		case string:
			if v != "" {
				out[k] = cleanString(v, maxRecordedString)
			}
		case float64:
			out[k] = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func onlyKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok && len(m) == 1
}

func str(v any) string {
	s, _ := v.(string)
	return cleanString(s, maxRecordedString)
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func orNot(s string) string {
	if s == "" {
		return trace.NotRecorded
	}
	return s
}

func uniqueSorted(xs []string) []string {
	sort.Strings(xs)
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// hostInfo describes the client's machine from /proc where Linux has it.
func hostInfo() *trace.HostInfo {
	h := &trace.HostInfo{CPUModel: trace.NotRecorded, Cores: runtime.NumCPU(), Kernel: trace.NotRecorded, OS: runtime.GOOS, Arch: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	return h
}
