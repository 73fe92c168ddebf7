package replay

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/h1"
)

// slowReads delays every read of its connection: a client whose read path
// costs readDelay more.
type slowReads struct {
	net.Conn
	delay time.Duration
}

func (c slowReads) Read(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Read(p)
}

// TestClientFloor: the floor is measured against the loopback server, and
// a read path made 3 ms slower (each read of the connection delayed) shows
// in it: every read on the way to the first token is delayed, so the
// floor grows by at least half the delay (the test's bound). A floor
// blind to the read path would stay near the plain one.
func TestClientFloor(t *testing.T) {
	start := time.Now()
	plain, err := measureFloor(context.Background(), DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	const delay = 3 * time.Millisecond
	slow, err := measureFloor(context.Background(), DefaultOptions(), func(c *http.Client) {
		tr := c.Transport.(*h1.Transport)
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return slowReads{conn, delay}, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("floor p50 %.3f ms p90 %.3f ms over %d requests (%v); with %v per read: p50 %.3f ms", plain.P50Ms, plain.P90Ms, plain.Requests, took, delay, slow.P50Ms)
	if plain.Requests != floorRequests-1 || plain.P50Ms < 0 || plain.P50Ms > plain.P90Ms || plain.P90Ms > plain.MaxMs {
		t.Errorf("floor %+v: want %d requests and 0 ≤ p50 ≤ p90 ≤ max", plain, floorRequests-1)
	}
	if slow.P50Ms < plain.P50Ms+float64(delay)/1e6/2 {
		t.Errorf("a read path %v slower moved the floor's p50 from %.3f to %.3f ms only", delay, plain.P50Ms, slow.P50Ms)
	}
}

// TestRunRecordsClientFloor: run.json carries the client's floor.
func TestRunRecordsClientFloor(t *testing.T) {
	_, info := replayTo(t, startSim(t, fastSim()), workload(t, 3, 10*time.Millisecond), nil)
	if f := info.ClientFloor; f == nil || f.Requests != floorRequests-1 || f.MaxMs <= 0 {
		t.Errorf("run.json client_floor %+v, want %d requests measured", f, floorRequests-1)
	}
}
