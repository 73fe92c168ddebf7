package replay

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// floorRequests is how many requests measure the client's floor: about
// 20 ms before a run, once per process and protocol.
const floorRequests = 100

// floors caches the floor by HTTP version for the process: one process
// runs every step of a sweep, and every test of a package, on one machine.
var floors sync.Map // HTTPVersion → *trace.ClientFloor

// clientFloor is the process's floor for opts' protocol, measured on first
// use.
func clientFloor(ctx context.Context, opts Options) (*trace.ClientFloor, error) {
	if f, ok := floors.Load(opts.HTTP); ok {
		return f.(*trace.ClientFloor), nil
	}
	f, err := measureFloor(ctx, opts, nil)
	if err != nil {
		return nil, err
	}
	floors.Store(opts.HTTP, f)
	return f, nil
}

// floorServer is a loopback endpoint in this process that streams four
// tokens and notes, per request, the time from the handler's start to the
// first token's flush: the server's own share of a TTFT. It notes the
// floor's own requests only (X-Request-Id floor-0 to floor-99), each in
// its slot, so whatever else reaches its port can make it hold nothing.
type floorServer struct {
	mu     sync.Mutex
	server [floorRequests]time.Duration
	noted  [floorRequests]bool
}

// floorSlot is the slot of a floor request's X-Request-Id, or false for
// another id.
func floorSlot(id string) (int, bool) {
	n, ok := strings.CutPrefix(id, floorRunID+"-")
	i, err := strconv.Atoi(n)
	return i, ok && err == nil && i >= 0 && i < floorRequests
}

// floorRunID is the run id the floor's requests carry.
const floorRunID = "floor"

// startFloorServer serves a floorServer on a loopback port until the
// returned server is closed.
func startFloorServer() (*floorServer, *http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, "", err
	}
	fs := &floorServer{}
	return fs, serveBounded(ln, fs, floorConns, true), "http://" + ln.Addr().String(), nil
}

func (s *floorServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	io.Copy(io.Discard, r.Body) // within helperBodyBytes (serveBounded)
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	var first time.Duration
	for i := range 4 {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" t%d\"}}]}\n\n", i)
		f.Flush()
		if i == 0 {
			first = time.Since(start)
		}
	}
	io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	if i, ok := floorSlot(r.Header.Get("X-Request-Id")); ok {
		s.mu.Lock()
		s.server[i], s.noted[i] = first, true
		s.mu.Unlock()
	}
}

// measureFloor measures the latency this client adds to a TTFT: it sends
// floorRequests streamed requests, one at a time, through the run's own
// transport settings and stream reader to a loopback server in this
// process, and takes each one's TTFT less the server's time from the
// request's arrival to its first token's flush. What is left is the
// client's send and read path (and the loopback), the floor under every
// TTFT it reports on an idle machine. A failure to measure is no failure
// of the run: the floor is then absent. The server in this process shares
// the client's CPUs: the floor is an upper bound on an idle machine.
func measureFloor(ctx context.Context, opts Options, transport func(*http.Client)) (*trace.ClientFloor, error) {
	fs, srv, url, err := startFloorServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()

	o := opts
	o.Target, o.APIKey, o.Headers, o.CACert, o.Insecure = url, "", nil, "", false
	o.RunID, o.Timeout, o.FirstTokenTimeout = floorRunID, 5*time.Second, 0
	r, err := newRunner(o)
	if err != nil {
		return nil, err
	}
	if transport != nil {
		transport(r.client)
	}
	r.startClock()
	body := []byte(`{"model":"floor","messages":[{"role":"user","content":"floor"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`)
	var added []float64
	for i := range floorRequests {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		res := trace.Result{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, Shape: trace.Shape{API: trace.APIChat}}
		r.exchange(ctx, nil, body, true, &res, nil)
		if res.Outcome != trace.OutcomeOK || res.SentNs == nil || res.FirstTokenNs == nil {
			return nil, fmt.Errorf("a loopback request ended %s: %s", res.Outcome, res.Error)
		}
		fs.mu.Lock()
		server, ok := fs.server[i], fs.noted[i]
		fs.mu.Unlock()
		if ok && i > 0 { // the first one dials
			added = append(added, float64(*res.FirstTokenNs-*res.SentNs-int64(server))/1e6)
		}
	}
	r.client.CloseIdleConnections()
	slices.Sort(added)
	at := func(p float64) float64 { return added[min(len(added)-1, int(p*float64(len(added))))] }
	return &trace.ClientFloor{P50Ms: at(0.5), P90Ms: at(0.9), MaxMs: added[len(added)-1], Requests: len(added)}, nil
}
