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

// dialRun replays six requests 300 ms apart over TLS whose handshake takes
// handshake, the server closing every other connection, so the run holds
// requests on new connections and on reused ones.
func dialRun(t *testing.T, handshake time.Duration) ([]trace.Result, *trace.RunInfo) {
	t.Helper()
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
	t.Cleanup(srv.Close)
	wl := workload(t, 6, 300*time.Millisecond)
	// Saturation is judged at half the handshake: a handshake counted as
	// the client's lateness trips it.
	rows, info := replayTo(t, srv.URL, wl, func(o *Options) {
		o.Insecure, o.API, o.MaxLateness = true, trace.APIChat, handshake/2
	})
	return rows, info
}

// TestWroteNsCoversTheDial: behind a TLS handshake that takes 80 ms, a
// request on a new connection is written to the wire at least 80 ms after
// it was handed to the transport, and the run's lateness to the wire says
// so; every result orders sent ≤ wrote ≤ first chunk ≤ done. These are
// lower bounds, true however busy the host; the upper ones, that a reused
// connection writes at once, are TestTimingWroteNsReusedConnection's.
func TestWroteNsCoversTheDial(t *testing.T) {
	const handshake = 80 * time.Millisecond
	rows, info := dialRun(t, handshake)
	var fresh, reused int
	for _, r := range rows {
		if r.Outcome != trace.OutcomeOK || r.SentNs == nil || r.WroteNs == nil {
			t.Fatalf("%s: %s %s, sent %v wrote %v", r.RequestID, r.Outcome, r.Error, r.SentNs, r.WroteNs)
		}
		if !(*r.SentNs <= *r.WroteNs && *r.WroteNs <= *r.FirstChunkNs && *r.FirstChunkNs <= *r.DoneNs) {
			t.Errorf("%s: sent %d, wrote %d, first chunk %d, done %d: out of order", r.RequestID, *r.SentNs, *r.WroteNs, *r.FirstChunkNs, *r.DoneNs)
		}
		if r.ConnReused {
			reused++
			continue
		}
		fresh++
		if toWire := time.Duration(*r.WroteNs - *r.SentNs); toWire < handshake {
			t.Errorf("%s on a new connection reached the wire %v after the transport got it, under the %v handshake", r.RequestID, toWire, handshake)
		}
	}
	if fresh == 0 || reused == 0 {
		t.Fatalf("%d new and %d reused connections; the test needs both", fresh, reused)
	}
	if info.LatenessToWire == nil || info.LatenessToWire.MaxMs < float64(handshake.Milliseconds()) {
		t.Errorf("lateness to the wire %+v does not hold the handshake", info.LatenessToWire)
	}
}

// TestTimingWroteNsReusedConnection: with the same 80 ms handshake, a
// request on a reused connection reaches the wire within 40 ms, and the
// handshake is the server's time: it stays out of the client's own
// lateness and does not mark the client saturated.
func TestTimingWroteNsReusedConnection(t *testing.T) {
	skipUnderRace(t)
	const handshake = 80 * time.Millisecond
	rows, info := dialRun(t, handshake)
	reused := 0
	for _, r := range rows {
		if r.SentNs == nil || r.WroteNs == nil || !r.ConnReused {
			continue
		}
		reused++
		if toWire := time.Duration(*r.WroteNs - *r.SentNs); toWire > handshake/2 {
			t.Errorf("%s on a reused connection reached the wire %v after the transport got it", r.RequestID, toWire)
		}
	}
	if reused == 0 {
		t.Fatal("no request went on a reused connection; the test needs one")
	}
	if info.Lateness.MaxMs >= float64(handshake.Milliseconds()) {
		t.Errorf("lateness %+v holds the handshake: only the wire figure should", info.Lateness)
	}
	if info.ClientSaturated {
		t.Error("a slow handshake marked the client saturated: a dial is the server's time, not the client's")
	}
}
