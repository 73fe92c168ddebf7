package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// arrival is one request as the server saw it, in wall-clock nanoseconds
// (the client runs in another process on the same host).
type arrival struct {
	id                 string
	arrived, firstByte int64
}

// logger keeps the arrivals in memory until the server stops, so writing
// them costs the measured requests nothing.
type logger struct {
	mu       sync.Mutex
	arrivals []arrival
	chunks   int
	itl      time.Duration // the wait between content events
}

func (l *logger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now().UnixNano()
	if r.Method == http.MethodGet {
		io.WriteString(w, `{"object":"list","data":[{"id":"arrivallog","object":"model"}]}`)
		return
	}
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	var first int64
	for i := range l.chunks {
		if i > 0 && l.itl > 0 {
			time.Sleep(l.itl)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok%d\"},\"finish_reason\":null}]}\n\n", i)
		f.Flush()
		if i == 0 {
			first = time.Now().UnixNano()
		}
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", l.chunks)
	id := r.Header.Get("X-Request-Id")
	l.mu.Lock()
	l.arrivals = append(l.arrivals, arrival{id: id, arrived: arrived, firstByte: first})
	l.mu.Unlock()
}

// serve answers until SIGINT or SIGTERM, then writes the log as CSV
// (request_id, arrived_unix_ns, first_byte_unix_ns).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8123", "listen address (loopback)")
	out := fs.String("log", "arrivals.csv", "where to write the arrivals on exit")
	chunks := fs.Int("chunks", 4, "content events per response")
	itl := fs.Duration("itl", 0, "wait between content events, as a server's inter-token latency (0: back to back)")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	l := &logger{chunks: max(*chunks, 1), itl: *itl, arrivals: make([]arrival, 0, 1<<16)}
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "arrivallog: serving on http://%s\n", ln.Addr())
	<-ctx.Done()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	l.mu.Lock()
	n := len(l.arrivals)
	err = trace.WriteFileAtomic(*out, func(f io.Writer) error {
		w := bufio.NewWriter(f)
		fmt.Fprintln(w, "request_id,arrived_unix_ns,first_byte_unix_ns")
		for _, a := range l.arrivals {
			fmt.Fprintf(w, "%s,%d,%d\n", a.id, a.arrived, a.firstByte)
		}
		return w.Flush()
	})
	l.mu.Unlock()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "arrivallog: %d arrivals written to %s\n", n, *out)
	return nil
}
