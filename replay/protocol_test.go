package replay

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// protoServer answers like a tiny OpenAI server and records the protocol
// and body of every generation request.
type protoServer struct {
	mu     sync.Mutex
	protos []int
	bodies []map[string]any
}

func (p *protoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	p.mu.Lock()
	p.protos = append(p.protos, r.ProtoMajor)
	p.bodies = append(p.bodies, body)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
}

func TestHTTPVersionsTLSAndForcedLength(t *testing.T) {
	wl := workload(t, 5, time.Millisecond)
	replayTo := func(target string, mod func(*Options)) error {
		t.Helper()
		opts := DefaultOptions()
		opts.Target = target
		mod(&opts)
		_, err := Run(context.Background(), wl, filepath.Join(t.TempDir(), "run"), opts)
		return err
	}

	// TLS with HTTP/2 negotiated by ALPN, trusting the server's certificate.
	tlsSrv := &protoServer{}
	ts := httptest.NewUnstartedServer(tlsSrv)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	if err := replayTo(ts.URL, func(o *Options) { o.HTTP, o.CACert, o.ForceOutputLen = "2", ca, true }); err != nil {
		t.Fatal(err)
	}
	for i, p := range tlsSrv.protos {
		if p != 2 {
			t.Errorf("TLS request %d spoke HTTP/%d, want 2", i, p)
		}
	}
	if b := tlsSrv.bodies[0]; b["ignore_eos"] != true || b["min_tokens"] != b["max_tokens"] {
		t.Errorf("--force-output-len body: ignore_eos %v, min_tokens %v, max_tokens %v", b["ignore_eos"], b["min_tokens"], b["max_tokens"])
	}
	// Without trusting the certificate the preflight fails, naming the fix.
	if err := replayTo(ts.URL, func(o *Options) {}); err == nil || !strings.Contains(err.Error(), "cannot reach endpoint") {
		t.Errorf("untrusted certificate: %v", err)
	}

	// Plain http: HTTP/1.1 by default, HTTP/2 by prior knowledge when asked.
	plain := &protoServer{}
	srv := &http.Server{Handler: plain, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String()
	if err := replayTo(url, func(o *Options) {}); err != nil {
		t.Fatal(err)
	}
	if err := replayTo(url, func(o *Options) { o.HTTP = "2" }); err != nil {
		t.Fatal(err)
	}
	if len(plain.protos) != 10 || plain.protos[0] != 1 || plain.protos[9] != 2 {
		t.Errorf("plain http protocols %v, want five HTTP/1 then five HTTP/2", plain.protos)
	}
	if err := replayTo(url, func(o *Options) { o.HTTP = "3" }); !isOptionError(err, "HTTP", "use 1.1 or 2") {
		t.Errorf("HTTP 3: %v", err)
	}
}

// TestServerTokenizerCalibration counts with the endpoint's /tokenize: the
// simulator serving o200k_base while the client's default is cl100k_base,
// prompts sized by the server's own count are exact by the server's usage.
func TestServerTokenizerCalibration(t *testing.T) {
	o := fastSim()
	o.Tokenizer = "o200k_base"
	target := startSim(t, o)
	wl := workload(t, 20, time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target, opts.Tokenizer = target, TokenizerServer
	info, err := Run(context.Background(), wl, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.Tokenizer, "server:") || info.TokenizerFailures != 0 {
		t.Errorf("tokenizer %q, failures %d", info.Tokenizer, info.TokenizerFailures)
	}
	rows, _ := trace.ReadResults(run)
	for _, r := range rows {
		if r.UsagePromptTokens == nil || *r.UsagePromptTokens != r.InputTokens {
			t.Errorf("%s: server counted %v prompt tokens, workload asked %d", r.RequestID, r.UsagePromptTokens, r.InputTokens)
		}
	}
	// An endpoint without /tokenize is refused with the way out.
	plain := httptest.NewServer(&protoServer{})
	defer plain.Close()
	opts.Target = plain.URL
	if _, err := Run(context.Background(), wl, filepath.Join(t.TempDir(), "r2"), opts); err == nil || !strings.Contains(err.Error(), "/tokenize") {
		t.Errorf("no /tokenize: %v", err)
	}
}
