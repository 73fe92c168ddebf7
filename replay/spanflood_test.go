package replay

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// floodInFlight is the line the child prints once its server holds every
// request of the run.
const floodInFlight = "all requests in flight"

// spanFloodChildEnv makes TestSpanReceiverFloodLosesNoResults run its
// replay under a lowered descriptor limit.
const spanFloodChildEnv = "SERVETRACE_SPAN_FLOOD_CHILD"

// The flood test's figures: a replay of floodRequests requests under a
// limit of floodFiles descriptors, while the parent opens floodConns
// connections to its span receiver, each a request whose body never
// ends.
const (
	floodRequests = 40
	floodFiles    = 256
	floodConns    = 1000
)

// TestSpanReceiverFloodLosesNoResults runs a replay in a child process
// limited to 256 descriptors, its span receiver on, while this process
// opens 1,000 connections to the receiver, each sending the head of an
// export whose body never comes (slowloris). The server answers the run's
// 40 requests, all sent before the flood begins, only once the flood is
// in place (and the child's descriptors are nearly all taken, or 3 s have
// passed). Every one of the 40 ok results must be in the run dir.
func TestSpanReceiverFloodLosesNoResults(t *testing.T) {
	if os.Getenv(spanFloodChildEnv) != "" {
		spanFloodChild(t)
		return
	}
	runDir := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), spanFloodChildEnv+"="+runDir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var addr string
	var inFlight bool
	var out []string
	for !inFlight && sc.Scan() {
		out = append(out, sc.Text())
		if a, ok := strings.CutPrefix(sc.Text(), "receiving the server's spans on "); ok {
			addr, _, _ = strings.Cut(a, " ")
		}
		inFlight = strings.Contains(sc.Text(), floodInFlight)
	}
	if addr == "" || !inFlight {
		cmd.Wait()
		t.Fatalf("the child named no span receiver, or its requests were not all sent:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
	}
	conns, opened := flood(addr)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	t.Logf("%d of %d connections to the receiver opened", opened, floodConns)
	fmt.Fprintln(stdin, "go")
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	err := cmd.Wait()
	if err != nil || !strings.Contains(strings.Join(out, "\n"), fmt.Sprintf("ok results: %d", floodRequests)) {
		t.Fatalf("the replay under the flood (%v):\n%s\n%s", err, strings.Join(out, "\n"), stderr.String())
	}
}

// flood opens floodConns connections to addr, each sending the head of
// an export and a little of its body, and returns those that opened.
func flood(addr string) ([]net.Conn, int) {
	var mu sync.Mutex
	var conns []net.Conn
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= floodConns {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					continue
				}
				fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: spans\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000000\r\n\r\n\x0a")
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return conns, len(conns)
}

// spanFloodChild is the child's side: the replay, under floodFiles
// descriptors.
func spanFloodChild(t *testing.T) {
	lim := syscall.Rlimit{Cur: floodFiles, Max: floodFiles}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n') // the flood is in place
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && openFiles() < floodFiles-16 {
			time.Sleep(10 * time.Millisecond)
		}
		close(release)
	}()
	var arrived atomic.Int64
	srv := newListener(t, func(_ *listener, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if arrived.Add(1) == floodRequests {
				fmt.Println(floodInFlight)
			}
			<-release
		}
		okServer(w, r)
	})
	var reqs []trace.Request
	for i := range floodRequests {
		q := oneRequest(nil)()[0]
		q.RequestID = fmt.Sprintf("r%d", i)
		reqs = append(reqs, q)
	}
	opts := DefaultOptions()
	opts.Target, opts.Timeout = srv.srv.URL, time.Minute
	opts.CollectSpans, opts.SpansWait = "127.0.0.1:0", 10*time.Millisecond
	opts.Progress = os.Stdout
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	runDir := os.Getenv(spanFloodChildEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, runErr := runRequests(ctx, sliceSource(reqs), &trace.Manifest{Kind: "workload", BlockSize: 16}, "", runDir, opts)
	fmt.Printf("\nrun: %v\n", runErr)
	if info != nil {
		fmt.Printf("outcomes %v, complete %v (%s)\n", info.Outcomes, info.Complete, info.Reason)
	}
	rows, err := trace.ReadResults(runDir)
	ok := 0
	for _, r := range rows {
		if r.Outcome == trace.OutcomeOK {
			ok++
		}
	}
	fmt.Printf("ok results: %d (%v)\n", ok, err)
}

// openFiles counts this process's open descriptors.
func openFiles() int {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return len(names)
}
