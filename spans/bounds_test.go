package spans

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/servetrace/servetrace/internal/memcap"
)

// emptySpansExport is an OTLP export of one scope holding n empty spans:
// two bytes a span on the wire, a few hundred bytes each once decoded
// into the protobuf types.
func emptySpansExport(n int) []byte {
	spans := bytes.Repeat([]byte{0x12, 0x00}, n) // ScopeSpans.spans (2), empty
	ss := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), spans)
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ss)
}

// emptySpansJSON is the same as OTLP/JSON: n spans written as {}.
func emptySpansJSON(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"resourceSpans":[{"scopeSpans":[{"spans":[{}`)
	b.Write(bytes.Repeat([]byte(",{}"), n-1))
	b.WriteString(`]}]}]}`)
	return b.Bytes()
}

// testRawCodec sends and receives gRPC messages as the bytes they are, so a
// test can send an export no protobuf type could hold in memory.
type testRawCodec struct{}

func (testRawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (testRawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (testRawCodec) Name() string { return "proto" }

// exportRaw sends msg, a serialized export, over gRPC.
func exportRaw(ctx context.Context, conn *grpc.ClientConn, msg []byte) error {
	var resp []byte
	return conn.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &msg, &resp, grpc.ForceCodecV2(testRawCodec{}))
}

// postExport posts body to the receiver's /v1/traces.
func postExport(addr, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/traces", body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	return http.DefaultClient.Do(req)
}

// TestLongReceiverDecodeIsBounded sends the receiver, at once, four
// 16 MiB protobuf exports of empty spans over HTTP, two over gRPC and one
// 16 MiB OTLP/JSON export of empty spans: each would decode into gigabytes
// of protobuf structs. Under a 512 MiB cap the receiver must answer every
// one, taking it (its spans counted as no request's) or refusing it as
// busy (429, ResourceExhausted) for the exporter to retry.
func TestLongReceiverDecodeIsBounded(t *testing.T) {
	memcap.Run(t, 512<<20, func(t *testing.T) {
		c := NewCollector("run", 100)
		r, err := Listen("127.0.0.1:0", c, false)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		n := (MaxMessageBytes - 16) / 2
		pb := emptySpansExport(n)
		js := emptySpansJSON((MaxMessageBytes - 64) / 3)
		conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var taken, busy int
		var faults []string
		answer := func(what string, ok, refused bool, detail string) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ok:
				taken++
			case refused:
				busy++
			default:
				faults = append(faults, what+": "+detail)
			}
		}
		for i := range 4 {
			wg.Go(func() {
				resp, err := postExport(r.Addr(), "application/x-protobuf", bytes.NewReader(pb))
				if err != nil {
					answer(fmt.Sprintf("protobuf %d", i), false, false, err.Error())
					return
				}
				resp.Body.Close()
				answer(fmt.Sprintf("protobuf %d", i), resp.StatusCode == http.StatusOK, resp.StatusCode == http.StatusTooManyRequests, resp.Status)
			})
		}
		for i := range 2 {
			wg.Go(func() {
				err := exportRaw(ctx, conn, pb)
				answer(fmt.Sprintf("gRPC %d", i), err == nil, status.Code(err) == codes.ResourceExhausted, fmt.Sprint(err))
			})
		}
		wg.Go(func() {
			resp, err := postExport(r.Addr(), "application/json", bytes.NewReader(js))
			if err != nil {
				answer("json", false, false, err.Error())
				return
			}
			resp.Body.Close()
			answer("json", resp.StatusCode == http.StatusOK, resp.StatusCode == http.StatusTooManyRequests, resp.Status)
		})
		wg.Wait()
		if len(faults) > 0 || taken == 0 {
			t.Fatalf("%d exports taken, %d refused as busy; faults: %v", taken, busy, faults)
		}
		if got := c.Counts(); got.Kept != 0 || got.NotRequests != got.Spans || got.Spans < int64(n) {
			t.Errorf("counts %+v: want the empty spans of %d exports counted as no request's", got, taken)
		}
	})
}

// TestReceiverRefusesWhenBusy holds exports in progress (bodies half
// sent) until the receiver refuses the next as busy: 429 with a
// Retry-After over HTTP, ResourceExhausted with a RetryInfo over gRPC, as
// the OTLP exporters retry. The held exports, once whole, are taken.
func TestReceiverRefusesWhenBusy(t *testing.T) {
	c := NewCollector("run", 100)
	c.Expect("a")
	r, err := Listen("127.0.0.1:0", c, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	body, _ := proto.Marshal(export("run", "a"))
	const tries = 16
	type answer struct {
		i    int
		resp *http.Response
		err  error
	}
	answers := make(chan answer, tries)
	conns := make([]net.Conn, tries)
	for i := range tries {
		conn, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
		fmt.Fprintf(conn, "POST /v1/traces HTTP/1.1\r\nHost: spans\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n", len(body))
		conn.Write(body[:len(body)/2])
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			answers <- answer{i, resp, err}
		}()
	}
	deadline := time.After(30 * time.Second) // a hang, not a timing
	refused := map[int]bool{}
	for len(refused) < tries-maxExports {
		select {
		case a := <-answers:
			if a.err != nil {
				t.Fatalf("export %d: %v", a.i, a.err)
			}
			if a.resp.StatusCode != http.StatusTooManyRequests || a.resp.Header.Get("Retry-After") == "" {
				t.Fatalf("export %d while others were in progress: %s, Retry-After %q; want 429 with a Retry-After", a.i, a.resp.Status, a.resp.Header.Get("Retry-After"))
			}
			refused[a.i] = true
		case <-deadline:
			t.Fatalf("%d exports in progress at once, %d refused: want all but %d refused as busy", tries, len(refused), maxExports)
		}
	}

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = exportRaw(ctx, conn, body)
	st, _ := status.FromError(err)
	var retry bool
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
			retry = true
		}
	}
	if st.Code() != codes.ResourceExhausted || !retry {
		t.Errorf("gRPC export while busy: %v (details %v), want ResourceExhausted with a RetryInfo", err, st.Details())
	}

	for i, conn := range conns {
		if !refused[i] {
			conn.Write(body[len(body)/2:])
		}
	}
	for range maxExports {
		select {
		case a := <-answers:
			if a.err != nil || a.resp.StatusCode != http.StatusOK {
				t.Errorf("held export %d, completed: %v %v", a.i, a.resp, a.err)
			}
		case <-ctx.Done():
			t.Fatal("the held exports were not answered")
		}
	}
	if got := c.Counts(); got.Kept != 1 || got.Duplicates != maxExports-1 {
		t.Errorf("counts %+v: want the held exports' span kept once", got)
	}
	if !strings.HasPrefix(r.Addr(), "127.0.0.1:") {
		t.Errorf("listening on %s", r.Addr())
	}
}

// TestReceiverCutsHalfSentRequests: a connection that sends part of its
// headers, or its headers and part of its body, and then nothing, is cut
// once the header or read timeout has passed, so it cannot hold a
// connection, and a descriptor, for good.
func TestReceiverCutsHalfSentRequests(t *testing.T) {
	defer func(h, r time.Duration) { headerTimeout, readTimeout = h, r }(headerTimeout, readTimeout)
	headerTimeout, readTimeout = 200*time.Millisecond, 300*time.Millisecond
	r, err := Listen("127.0.0.1:0", NewCollector("run", 1), false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, half := range []string{
		"POST /v1/traces HTTP/1.1\r\nHost: spans\r\n",
		"POST /v1/traces HTTP/1.1\r\nHost: spans\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n\x0a",
	} {
		conn, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(half))
		conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang, not a timing
		_, err = io.Copy(io.Discard, conn)
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%q: the receiver held the connection for 20 s", half)
		}
	}
}

// TestReadFileBoundsEmptyExports: a gzip file of four million blank
// lines (12 MB inflated from 12 KB) is refused as a compression bomb
// before it is read through, and a plain file of 100,000 empty exports
// ("{}") at the first past the bound on exports without a span, which a
// collector never writes; each error names the file.
func TestReadFileBoundsEmptyExports(t *testing.T) {
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("  \n"), 4_000_000))
	zw.Close()
	bomb := filepath.Join(dir, "blank.jsonl.gz")
	os.WriteFile(bomb, gz.Bytes(), 0o644)
	plain := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(plain, bytes.Repeat([]byte("{}\n"), 100_000), 0o644)
	for _, c := range []struct{ path, want string }{
		{bomb, "blank.jsonl.gz inflates more than 256-fold"},
		{plain, fmt.Sprintf("empty.jsonl:%d: more than %d exports without a span", maxEmptyExports+1, maxEmptyExports)},
	} {
		err := ReadFile(c.path, NewCollector("run", 1))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", filepath.Base(c.path), err, c.want)
		}
	}
}

// TestJSONNestingIsBounded: an OTLP/JSON export nested deeper than
// maxJSONDepth, where the walker skips a value it does not read, is
// refused before the decoder's state grows with it; one just within the
// bound is read.
func TestJSONNestingIsBounded(t *testing.T) {
	nested := func(depth int) []byte {
		inner := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		return []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"events":` + inner + `}]}]}]}`)
	}
	// The span sits 7 levels down: export, resourceSpans, its element,
	// scopeSpans, its element, spans, the span.
	if _, err := NewCollector("run", 1).addJSON(nested(maxJSONDepth - 7)); err != nil {
		t.Errorf("nested %d deep: %v", maxJSONDepth, err)
	}
	_, err := NewCollector("run", 1).addJSON(nested(1 << 20))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d levels", maxJSONDepth)) {
		t.Errorf("nested a million deep: %v, want refused past %d levels", err, maxJSONDepth)
	}
}
