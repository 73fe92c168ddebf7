package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// hostileServer is an OpenAI-compatible endpoint that does what careless
// and hostile servers do: it quotes the Authorization header and the whole
// request body back in its error messages (as FastAPI validation errors and
// some gateways do), mid-stream and as HTTP errors, and streams a
// recognisable reply. It keeps the prompt text it received, so a test can
// look for it in what the client wrote.
type hostileServer struct {
	mu      sync.Mutex
	n       int
	prompts []string
	auth    []string
}

// replyCanary is the text the hostile server streams as its reply.
const replyCanary = "WOMBATREPLY the reply text the client must not keep"

func (s *hostileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth, tenant := r.Header.Get("Authorization"), r.Header.Get("X-Tenant-Token")
	if r.Method == http.MethodGet {
		// A gateway that echoes the request's headers, plainly, base64-encoded
		// and spaced out, in its Server header and its model list (and, as
		// it answers every GET so, in the metrics scraped from it).
		w.Header().Set("Server", fmt.Sprintf("hostile-gw/2 (auth %s; tenant %s; b64 %s)", auth, tenant, base64.StdEncoding.EncodeToString([]byte(auth))))
		models, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{"id": "m", "object": "model",
			"owned_by": auth, "tenant": tenant, auth: "as a key", "encoded": base64.URLEncoding.EncodeToString([]byte(auth)), "spaced": spacedOut(auth)}}})
		w.Write(models)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Prompt   string `json:"prompt"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(body, &req)
	s.mu.Lock()
	s.n++
	n := s.n
	if req.Prompt != "" {
		s.prompts = append(s.prompts, req.Prompt)
	}
	for _, m := range req.Messages {
		s.prompts = append(s.prompts, m.Content)
	}
	s.auth = append(s.auth, auth)
	s.mu.Unlock()
	echo, _ := json.Marshal(fmt.Sprintf("invalid request from %s with %s (basic %s, spaced %s): input %s", auth, tenant,
		base64.StdEncoding.EncodeToString([]byte("user:"+strings.TrimPrefix(auth, "Bearer "))), spacedOut(tenant), body))
	switch n % 3 {
	case 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"object":"error","message":%s}`, echo)
	case 1:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", replyCanary)
		fmt.Fprintf(w, "data: {\"error\":{\"message\":%s}}\n\n", echo)
	default:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", replyCanary)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}
}

// spacedOut puts a space between every two characters of s.
func spacedOut(s string) string { return strings.Join(strings.Split(s, ""), " ") }

// encodedNeedles are the forms a hostile server sends a secret back in.
func encodedNeedles(name, secret string) map[string]string {
	return map[string]string{
		name:                       secret,
		name + ", base64":          base64.StdEncoding.EncodeToString([]byte(secret)),
		name + ", base64 url":      base64.URLEncoding.EncodeToString([]byte("Bearer " + secret)),
		name + ", Bearer base64":   base64.StdEncoding.EncodeToString([]byte("Bearer " + secret)),
		name + ", basic":           base64.StdEncoding.EncodeToString([]byte("user:" + secret)),
		name + ", spaced":          spacedOut(secret),
		name + ", spaced (Bearer)": spacedOut("Bearer " + secret),
	}
}

// TestSecurityAudit checks the security promises end to end through the
// CLI: the API key (from a file) and header values reach the server but no
// output, log or error; no request or response text reaches any file or
// terminal line, even when the server quotes them back; https endpoints are
// verified unless --insecure; the simulator refuses a non-loopback address
// unless --allow-remote.
func TestSecurityAudit(t *testing.T) {
	dir := t.TempDir()
	// 30 s of the Azure code sample, the 20 prompts and more checked below,
	// replayed 200 times faster: what is checked does not depend on timing.
	wl := workloadViaCLI(t, dir, "azure-code-2023", "30s")
	const key, headerSecret = "sk-audit-KEY-7d1e90b4", "hdr-AUDIT-3c5f77"
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("nothing secret or textual is written", func(t *testing.T) {
		srv := &hostileServer{}
		hs := httptest.NewServer(srv)
		defer hs.Close()
		run := filepath.Join(dir, "run")
		code, out, errOut := runCLI(t, "replay", wl, "--target", hs.URL, "--speed", "200", "--api-key-file", keyFile,
			"--header", "X-Tenant-Token="+headerSecret, "--out", run)
		if code != 0 {
			t.Fatalf("replay: exit %d\n%s", code, errOut)
		}
		code, report, errOut2 := runCLI(t, "analyze", run, "--json")
		if code != 0 {
			t.Fatalf("analyze: exit %d\n%s", code, errOut2)
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if len(srv.prompts) < 20 || srv.auth[0] != "Bearer "+key {
			t.Fatalf("the server saw %d prompts, Authorization %q: the key must still be sent", len(srv.prompts), srv.auth[0])
		}
		needles := map[string]string{"the reply text": "WOMBATREPLY"}
		maps.Copy(needles, encodedNeedles("the API key", key))
		maps.Copy(needles, encodedNeedles("a header value", headerSecret))
		for i, p := range srv.prompts {
			// Every 40-byte window of every prompt the server received.
			for j := 0; j+40 <= len(p); j += 40 {
				needles[fmt.Sprintf("prompt %d bytes %d–%d", i, j, j+40)] = p[j : j+40]
			}
		}
		texts := map[string][]byte{"replay's stdout": []byte(out), "replay's stderr": []byte(errOut), "analyze's output": []byte(report + errOut2)}
		filepath.WalkDir(run, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(p)
				texts[p] = b
			}
			return nil
		})
		// Parquet pages are compressed: scan the decoded results too.
		rows, err := trace.ReadResults(run)
		if err != nil {
			t.Fatal(err)
		}
		decoded, _ := json.Marshal(rows)
		texts["the decoded results"] = decoded
		var failed int
		for _, r := range rows {
			if r.Outcome == trace.OutcomeOK {
				continue
			}
			failed++
			if !strings.Contains(r.Error, "<request text>") || !strings.Contains(r.Error, "Bearer <redacted> with <redacted>") {
				t.Errorf("%s result %s: error %q; want the server's message with the key, header and request text scrubbed", r.Outcome, r.RequestID, r.Error)
			}
		}
		if failed < len(rows)/2 {
			t.Errorf("%d of %d results failed; the server failed two of every three", failed, len(rows))
		}
		for where, b := range texts {
			for what, n := range needles {
				if bytes.Contains(b, []byte(n)) {
					t.Errorf("%s found in %s", what, where)
				}
			}
		}
		t.Logf("scanned %d outputs for %d needles; %d of %d results carry a scrubbed server message", len(texts), len(needles), failed, len(rows))
	})

	// scanRun fails the test for every needle found in the run dir (the
	// decoded results too) or in the given outputs.
	scanRun := func(t *testing.T, run string, needles map[string]string, outputs map[string]string) {
		t.Helper()
		texts := map[string][]byte{}
		for k, v := range outputs {
			texts[k] = []byte(v)
		}
		filepath.WalkDir(run, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(p)
				texts[p] = b
			}
			return nil
		})
		if rows, err := trace.ReadResults(run); err == nil {
			decoded, _ := json.Marshal(rows)
			texts["the decoded results"] = decoded
		}
		for where, b := range texts {
			for what, n := range needles {
				if bytes.Contains(b, []byte(n)) {
					t.Errorf("%s found in %s", what, where)
				}
			}
		}
	}

	t.Run("redirects are not followed and carry no secret", func(t *testing.T) {
		// The second listener records whatever reaches it.
		var mu sync.Mutex
		var reached []string
		elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			reached = append(reached, fmt.Sprintf("%s %s Authorization=%q X-Tenant-Token=%q", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Tenant-Token")))
			mu.Unlock()
			(&hostileServer{}).ServeHTTP(w, r)
		}))
		defer elsewhere.Close()
		codes := []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}
		var n atomic.Int64
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
				return
			}
			http.Redirect(w, r, elsewhere.URL+r.URL.Path, codes[n.Add(1)%int64(len(codes))])
		}))
		defer hs.Close()
		for _, follow := range []bool{false, true} {
			run := filepath.Join(dir, fmt.Sprintf("redirect-follow-%v", follow))
			args := []string{"replay", wl, "--target", hs.URL, "--speed", "200", "--api-key-file", keyFile, "--header", "X-Tenant-Token=" + headerSecret, "--out", run}
			if follow {
				args = append(args, "--follow-redirects") // another origin is still not followed
			}
			code, out, errOut := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("replay: exit %d\n%s", code, errOut)
			}
			rows, err := trace.ReadResults(run)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Outcome != trace.OutcomeHTTPError || r.HTTPStatus < 300 || r.HTTPStatus > 399 || !strings.Contains(r.Error, elsewhere.URL) {
					t.Errorf("follow %v: %s: %s HTTP %d %q; want http_error naming the Location's origin", follow, r.RequestID, r.Outcome, r.HTTPStatus, r.Error)
					break
				}
			}
			scanRun(t, run, map[string]string{"the API key": key, "a header value": headerSecret}, map[string]string{"stdout": out, "stderr": errOut})
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reached) > 0 {
			t.Errorf("%d requests reached the other origin, the first %s", len(reached), reached[0])
		}
	})

	t.Run("URL credentials and query secrets are never written", func(t *testing.T) {
		hs := httptest.NewServer(&hostileServer{})
		defer hs.Close()
		const pass, query, metricsToken = "URLPASS-6e21c9", "QUERYSECRET-0b7d55", "METRICSECRET-a3f08e"
		withUser := strings.Replace(hs.URL, "http://", "http://audit:"+pass+"@", 1)
		target := withUser + "/?api_key=" + query
		metrics := withUser + "/metrics?token=" + metricsToken
		needles := map[string]string{}
		for name, secret := range map[string]string{"the URL password": pass, "the query secret": query, "the metrics token": metricsToken} {
			maps.Copy(needles, encodedNeedles(name, secret))
		}
		needles["the basic credential"] = base64.StdEncoding.EncodeToString([]byte("audit:" + pass))
		run := filepath.Join(dir, "url-secrets")
		code, out, errOut := runCLI(t, "replay", wl, "--target", target, "--metrics-url="+metrics, "--metrics-interval", "200ms",
			"--speed", "200", "--api-key-file", keyFile, "--out", run)
		if code != 0 {
			t.Fatalf("replay: exit %d\n%s", code, errOut)
		}
		ri, err := trace.ReadRunInfo(run)
		if err != nil {
			t.Fatal(err)
		}
		if len(ri.Metrics) == 0 || !strings.Contains(ri.Target, "REDACTED@") || !strings.Contains(ri.Target, "api_key=REDACTED") {
			t.Errorf("target %q, %d scrapes: want the user info and query REDACTED, and scrapes written", ri.Target, len(ri.Metrics))
		}
		scanRun(t, run, needles, map[string]string{"stdout": out, "stderr": errOut})
		// Errors that print the URL print it redacted.
		for _, bad := range []string{"htp://audit:" + pass + "@127.0.0.1:1/?api_key=" + query, "http://audit:" + pass + "@127.0.0.1:1/?api_key=" + query} {
			code, out, errOut := runCLI(t, "replay", wl, "--target", bad, "--out", filepath.Join(dir, "url-bad"))
			if code == 0 {
				t.Errorf("--target %s: exit 0", bad)
			}
			scanRun(t, filepath.Join(dir, "url-bad"), needles, map[string]string{"stdout": out, "stderr": errOut})
		}
	})

	t.Run("https is verified unless --insecure", func(t *testing.T) {
		hs := httptest.NewTLSServer(&hostileServer{})
		defer hs.Close()
		code, _, errOut := runCLI(t, "replay", wl, "--target", hs.URL, "--speed", "200", "--out", filepath.Join(dir, "tls-refused"))
		if code == 0 || !strings.Contains(errOut, "certificate") {
			t.Errorf("untrusted certificate: exit %d, %q; want a failure naming the certificate", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "tls-refused", trace.RunInfoName)); err == nil {
			t.Errorf("a refused endpoint left a run dir behind")
		}
		code, _, errOut = runCLI(t, "replay", wl, "--target", hs.URL, "--speed", "200", "--insecure", "--out", filepath.Join(dir, "tls-insecure"))
		if code != 0 {
			t.Errorf("--insecure: exit %d, %s", code, errOut)
		}
	})

	t.Run("the simulator stays on loopback unless told", func(t *testing.T) {
		s, err := sim.New(sim.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if rs, err := s.Start("0.0.0.0:0", false); err == nil {
			rs.Close()
			t.Errorf("the simulator listened on all interfaces without --allow-remote")
		} else if !errors.Is(err, sim.ErrNotLoopback) {
			t.Errorf("refusal %q is not sim.ErrNotLoopback", err)
		}
		code, _, errOut := runCLI(t, "sim", "--addr", "0.0.0.0:0")
		if code == 0 || !strings.Contains(errOut, "--allow-remote") {
			t.Errorf("servetrace sim --addr 0.0.0.0:0: exit %d, %q; want a refusal naming --allow-remote", code, errOut)
		}
	})
}

// TestReplayErrorsNameFlags: replay and sim report options by their
// Options fields; the CLI names the flags, in the field and in the reason,
// with the value and what to do.
func TestReplayErrorsNameFlags(t *testing.T) {
	dir := t.TempDir()
	wl := workloadViaCLI(t, dir, "azure-code-2023", "3s")
	out := filepath.Join(dir, "r")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--concurrency", "4", "--rate", "2"}, []string{"--concurrency 4: runs closed loop; it does not combine with --rate or --max-concurrency (use --rate with --max-concurrency"}},
		{[]string{"--lead-in", "1m"}, []string{"--lead-in 1m0s: needs --from"}},
		{[]string{"--wait-idle", "1s"}, []string{"--wait-idle 1s: needs --metrics-url"}},
		{[]string{"--warmup", "-3"}, []string{`--warmup "-3": must not be negative`}},
		{[]string{"--warmup", "soon"}, []string{`--warmup "soon": give a duration`}},
		{[]string{"--shard", "5/2", "--run-id", "x"}, []string{`--shard "5/2": want i/N`}},
		{[]string{"--arrival", "fractal", "--rate", "1"}, []string{`--arrival "fractal": use poisson, gamma or constant`}},
		{[]string{"--http", "3"}, []string{`--http "3": use 1.1 or 2`}},
		{[]string{"--from", "10m", "--to", "5m"}, []string{`--to "5m": must be after --from`}},
		{[]string{"--from", "yesterday"}, []string{`--from "yesterday": give an RFC 3339 time`}},
		{[]string{"--target", "http://127.0.0.1:1"}, []string{"--target: cannot reach endpoint http://127.0.0.1:1", "point --target at a running server"}},
		{[]string{"--model-map", "nonsense"}, []string{`--model-map: "nonsense" is not key=value`}},
		{[]string{"--speed", "-1"}, []string{"--speed -1: must be a finite positive number"}},
	} {
		code, _, errOut := runCLI(t, append([]string{"replay", wl, "--out", out}, c.args...)...)
		for _, w := range c.want {
			if code == 0 || !strings.Contains(errOut, w) {
				t.Errorf("replay %v: exit %d, %q; want %q", c.args, code, strings.TrimSpace(errOut), w)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "h200-dreams"}, `--preset "h200-dreams": unknown; use one of:`},
		{[]string{"--fail-rate", "0.7", "--reset-rate", "0.6"}, "--fail-rate: --fail-rate, --stream-error-rate, --reset-rate, --stall-rate and --malformed-rate add up to 1.3"},
		{[]string{"--stop-rate", "2"}, "--stop-rate 2: must be within [0, 1]"},
		{[]string{"--prefill-per-token", "-1ms"}, "--prefill-per-token -1ms: must not be negative"},
	} {
		code, _, errOut := runCLI(t, append([]string{"sim", "--addr", "127.0.0.1:0"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("sim %v: exit %d, %q; want %q", c.args, code, strings.TrimSpace(errOut), c.want)
		}
	}
}
