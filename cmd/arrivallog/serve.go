package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	"github.com/servetrace/servetrace/trace"
)

// arrival is one request as the server saw it, in wall-clock nanoseconds
// (the client runs in another process on the same host).
type arrival struct {
	id                 string
	arrived, firstByte int64
}

// Bounds on what a load, or anyone reaching the port, can make the server
// hold. It keeps at most -max-arrivals arrivals (counting the rest as
// dropped), each id within maxIDBytes (a longer one is logged empty: no
// client's id is that long); a request's headers within maxHeaderBytes
// and its body within maxBodyBytes, read within readTimeout of its start;
// each write within writeTimeout, or the response is cut; at most
// maxConns connections at once (more wait in the kernel's queue), idle
// ones closed after idleTimeout.
const (
	defaultMaxArrivals = 1_000_000
	mostArrivals       = 10_000_000 // -max-arrivals at most, and the rows report reads
	maxIDBytes         = 128
	maxHeaderBytes     = 64 << 10
	maxBodyBytes       = 64 << 20
)

// The timeouts and the connection cap, variables so that a test can
// reach them.
var (
	maxConns      = 16384
	headerTimeout = 10 * time.Second
	readTimeout   = 60 * time.Second
	writeTimeout  = 60 * time.Second
	idleTimeout   = 5 * time.Minute
)

// logger keeps the arrivals in memory until the server stops, so writing
// them costs the measured requests nothing.
type logger struct {
	mu       sync.Mutex
	arrivals []arrival
	max      int // arrivals kept at most
	dropped  int // arrivals past max
	chunks   int
	itl      time.Duration // the wait between content events
}

func (l *logger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now().UnixNano()
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if r.Method == http.MethodGet {
		io.WriteString(w, `{"object":"list","data":[{"id":"arrivallog","object":"model"}]}`)
		return
	}
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxBodyBytes)); err != nil {
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return // too large, or cut off: no arrival to log
	}
	w.Header().Set("Content-Type", "text/event-stream")
	var first int64
	for i := range l.chunks {
		if i > 0 && l.itl > 0 {
			time.Sleep(l.itl)
		}
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok%d\"},\"finish_reason\":null}]}\n\n", i)
		if rc.Flush() != nil {
			break // the client is gone, or stopped reading
		}
		if i == 0 {
			first = time.Now().UnixNano()
		}
		if i == l.chunks-1 {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", l.chunks)
		}
	}
	id := r.Header.Get("X-Request-Id")
	if len(id) > maxIDBytes {
		id = ""
	}
	l.mu.Lock()
	if len(l.arrivals) < l.max {
		l.arrivals = append(l.arrivals, arrival{id: strings.Clone(id), arrived: arrived, firstByte: first})
	} else {
		l.dropped++
	}
	l.mu.Unlock()
}

// errNotLoopback refuses an -addr on another interface than loopback
// without -allow-remote.
var errNotLoopback = errors.New("is not a loopback address; pass -allow-remote to serve on another interface")

// listen listens on addr, on loopback unless allowRemote, serving at most
// maxConns connections at once.
func listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-addr %s: want host:port, e.g. 127.0.0.1:8123", addr)
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if !allowRemote && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("-addr %s %w", addr, errNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, maxConns), nil
}

// newServer returns the server for l, within the bounds above (the
// listener caps the connections). net/http lifts the read deadline once a
// body is read, so a stream outlives readTimeout.
func newServer(l *logger) *http.Server {
	return &http.Server{Handler: l, ReadHeaderTimeout: headerTimeout, ReadTimeout: readTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
}

// writeLog writes the arrivals as CSV, quoting an id that holds a comma,
// a quote or a newline.
func writeLog(f io.Writer, arrivals []arrival) error {
	bw := bufio.NewWriter(f)
	w := csv.NewWriter(bw)
	w.Write([]string{"request_id", "arrived_unix_ns", "first_byte_unix_ns"})
	for _, a := range arrivals {
		w.Write([]string{a.id, strconv.FormatInt(a.arrived, 10), strconv.FormatInt(a.firstByte, 10)})
	}
	if w.Flush(); w.Error() != nil {
		return w.Error()
	}
	return bw.Flush()
}

// serve answers until SIGINT or SIGTERM, then writes the log as CSV
// (request_id, arrived_unix_ns, first_byte_unix_ns).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8123", "listen address (loopback unless -allow-remote)")
	allowRemote := fs.Bool("allow-remote", false, "allow an -addr on another interface than loopback")
	out := fs.String("log", "arrivals.csv", "where to write the arrivals on exit")
	chunks := fs.Int("chunks", 4, "content events per response")
	itl := fs.Duration("itl", 0, "wait between content events, as a server's inter-token latency (0: back to back)")
	maxArrivals := fs.Int("max-arrivals", defaultMaxArrivals, "arrivals kept, at most "+strconv.Itoa(mostArrivals)+"; later ones are counted as dropped")
	fs.Parse(args)
	if *maxArrivals < 1 || *maxArrivals > mostArrivals {
		return fmt.Errorf("-max-arrivals %d: want 1 to %d", *maxArrivals, mostArrivals)
	}
	ln, err := listen(*addr, *allowRemote)
	if err != nil {
		return err
	}
	l := &logger{chunks: max(*chunks, 1), itl: *itl, max: *maxArrivals, arrivals: make([]arrival, 0, min(*maxArrivals, 1<<16))}
	srv := newServer(l)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "arrivallog: serving on http://%s\n", ln.Addr())
	<-ctx.Done()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	l.mu.Lock()
	n, dropped := len(l.arrivals), l.dropped
	err = trace.WriteFileAtomic(*out, func(f io.Writer) error { return writeLog(f, l.arrivals) })
	l.mu.Unlock()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "arrivallog: %d arrivals written to %s\n", n, *out)
	if dropped > 0 {
		fmt.Fprintf(os.Stderr, "arrivallog: %d arrivals past -max-arrivals %d dropped\n", dropped, *maxArrivals)
	}
	return nil
}
