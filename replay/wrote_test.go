package replay

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestWroteNsCoversTheDial: behind a TLS handshake that takes 80 ms, a
// request on a new connection is written to the wire at least 80 ms after
// it was handed to the transport, and the run's lateness to the wire says
// so, while one on a reused connection is written at once; every result
// orders sent ≤ wrote ≤ first chunk ≤ done.
func TestWroteNsCoversTheDial(t *testing.T) {
	const handshake = 80 * time.Millisecond
	var served atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		}
		io.Copy(io.Discard, r.Body)
		if served.Add(1)%2 == 0 {
			w.Header().Set("Connection", "close") // the next request dials anew
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}))
	srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		time.Sleep(handshake)
		return nil, nil
	}}
	srv.StartTLS()
	defer srv.Close()
	// Requests 300 ms apart; the server closes every other connection.
	wl := workload(t, 6, 300*time.Millisecond)
	// Saturation is judged at half the handshake: a handshake counted as
	// the client's lateness still trips it, a stall of the host's (a few
	// milliseconds under -race on a busy machine, over 6 requests the
	// p99 is their maximum) does not.
	rows, info := replayTo(t, srv.URL, wl, func(o *Options) {
		o.Insecure, o.API, o.MaxLateness = true, trace.APIChat, handshake/2
	})
	var fresh, reused int
	for _, r := range rows {
		if r.Outcome != trace.OutcomeOK || r.SentNs == nil || r.WroteNs == nil {
			t.Fatalf("%s: %s %s, sent %v wrote %v", r.RequestID, r.Outcome, r.Error, r.SentNs, r.WroteNs)
		}
		if !(*r.SentNs <= *r.WroteNs && *r.WroteNs <= *r.FirstChunkNs && *r.FirstChunkNs <= *r.DoneNs) {
			t.Errorf("%s: sent %d, wrote %d, first chunk %d, done %d: out of order", r.RequestID, *r.SentNs, *r.WroteNs, *r.FirstChunkNs, *r.DoneNs)
		}
		toWire := time.Duration(*r.WroteNs - *r.SentNs)
		if r.ConnReused {
			reused++
			if toWire > 40*time.Millisecond {
				t.Errorf("%s on a reused connection reached the wire %v after the transport got it", r.RequestID, toWire)
			}
		} else {
			fresh++
			if toWire < handshake {
				t.Errorf("%s on a new connection reached the wire %v after the transport got it, under the %v handshake", r.RequestID, toWire, handshake)
			}
		}
	}
	if fresh == 0 || reused == 0 {
		t.Fatalf("%d new and %d reused connections; the test needs both", fresh, reused)
	}
	if info.LatenessToWire == nil || info.LatenessToWire.MaxMs < float64(handshake.Milliseconds()) || info.Lateness.MaxMs >= float64(handshake.Milliseconds()) {
		t.Errorf("lateness %+v, to the wire %+v: only the wire figure holds the handshake", info.Lateness, info.LatenessToWire)
	}
	if info.ClientSaturated {
		t.Error("a slow handshake marked the client saturated: a dial is the server's time, not the client's")
	}
}
