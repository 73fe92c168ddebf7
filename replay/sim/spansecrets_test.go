package sim

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/traceid"
)

// TestSpanExportPrintsNoSecret exports to a hostile collector that
// refuses every export, quoting the Authorization header it was sent (an
// OTEL_EXPORTER_OTLP_HEADERS token) in its answer, at an endpoint URL
// holding a password; then stops the simulator with its last spans still
// batched and the export's time already up. Neither what the exporter
// prints of the refusal nor the error of the shutdown may hold the token
// or the password.
func TestSpanExportPrintsNoSecret(t *testing.T) {
	const token, password = "TOPSECRET-TOKEN-77", "PASSWORD-2468"
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20"+token)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "500") // ms: gRPC to an HTTP/1 server gives up soon
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")            // ms: the batch goes, and fails, at once
	logged := captureStderr(t)
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "refused: "+r.Header.Get("Authorization"), http.StatusUnauthorized)
	}))
	defer col.Close()
	for _, protocol := range []string{OTLPHTTPProtobuf, OTLPGRPC} {
		opts := fast()
		opts.OTLPTracesEndpoint = "http://user:" + password + "@" + strings.TrimPrefix(col.URL, "http://") + "/v1/traces"
		opts.OTLPProtocol = protocol
		rs := start(t, opts)
		send := func() {
			req, _ := http.NewRequest(http.MethodPost, rs.URL+"/v1/completions", strings.NewReader(`{"model":"servetrace-sim","prompt":"x","max_tokens":2}`))
			req.Header.Set("traceparent", traceid.Traceparent("r", "a"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		send()
		if protocol == OTLPHTTPProtobuf { // its refusal goes to the SDK's error handler
			for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logged(), "refused") && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
		}
		send() // batched until the shutdown below, whose time is up
		rs.srv.Close()
		rs.sim.engine.stop()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := rs.sim.spans.shutdown(ctx)
		rs.Close()
		for what, text := range map[string]string{"stderr": logged(), "the shutdown error": errString(err)} {
			if strings.Contains(text, token) || strings.Contains(text, password) {
				t.Errorf("%s: %s holds a secret:\n%s", protocol, what, text)
			}
		}
		if err == nil {
			t.Errorf("%s: a shutdown whose time was up reported no lost spans", protocol)
		}
	}
	if !strings.Contains(logged(), "refused") {
		t.Errorf("the collector's refusal was not logged:\n%s", logged())
	}
}

// captureStderr sends what the process writes to its standard error
// (descriptor 2, where the OpenTelemetry SDK's error handler writes) to
// a file until the test ends, and returns a reader of it so far.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(f.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Dup2(saved, 2)
		syscall.Close(saved)
		f.Close()
	})
	return func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
