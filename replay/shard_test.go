package replay

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

// TestTimingShards runs 4 shard processes at 125 requests/s each (one
// 500 req/s schedule split by --shard i/4 with a shared --start-at and run
// id) against one loopback server, and checks at the server that the
// merged arrivals follow the schedule (p99 error under 2 ms after the
// constant offset) and that every request id arrived exactly once. analyze
// then merges the shards as one run.
func TestTimingShards(t *testing.T) {
	skipUnderRace(t)
	const shards, rate, seconds = 4, 500, 12
	n := rate * seconds
	srv := &arrivalServer{start: time.Now(), at: make(map[string]int64, n)}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	wl := workload(t, n, time.Millisecond)
	dir := t.TempDir()
	startAt := time.Now().Add(3 * time.Second).UTC()
	stopProbe := startNoiseProbe(t)
	var wg sync.WaitGroup
	errs := make([]error, shards)
	var runs []string
	for i := range shards {
		run := filepath.Join(dir, fmt.Sprintf("shard-%d", i))
		runs = append(runs, run)
		spec := fmt.Sprintf("%s|%s|%s|%d|%d|%s|sharded|%d", hs.URL, wl, run, i, shards, startAt.Format(time.RFC3339Nano), rate)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), shardChildEnv+"="+spec)
		wg.Go(func() {
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("shard %d: %v\n%s", i, err, out)
			}
		})
	}
	wg.Wait()
	stalls := stopProbe()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var scheduled []trace.Result
	perShard := make([]int, shards)
	for i, run := range runs {
		rows, err := trace.ReadResults(run)
		if err != nil {
			t.Fatal(err)
		}
		perShard[i] = len(rows)
		scheduled = append(scheduled, rows...)
	}
	if len(scheduled) != n || len(srv.at) != n || srv.dup != 0 {
		t.Fatalf("%d results over the shards (%v), %d distinct arrivals, %d duplicates; want %d, %d, 0", len(scheduled), perShard, len(srv.at), srv.dup, n, n)
	}
	for i, k := range perShard {
		if k < n/shards*8/10 || k > n/shards*12/10 {
			t.Errorf("shard %d sent %d of %d requests: the split is lopsided", i, k, n)
		}
	}
	var arrivals timingErrors
	for _, r := range scheduled {
		at, ok := srv.at["sharded-"+r.RequestID]
		if !ok {
			t.Fatalf("request %s never reached the server", r.RequestID)
		}
		arrivals.add(startAt.UnixNano()+r.ScheduledNs, float64(at-r.ScheduledNs)/1e6)
	}
	rep, err := analyze.Analyze(runs, analyze.Options{Percentiles: []float64{50, 99}, Bootstrap: analyze.BootstrapOptions{Resamples: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Counted != n || rep.Repeats != nil || len(rep.Runs) != shards {
		t.Errorf("analyze: %d counted, repeats %v, %d runs; want %d, none (one run id), %d", rep.Requests.Counted, rep.Repeats != nil, len(rep.Runs), n, shards)
	}
	for _, r := range rep.Runs {
		if r.RunID != "sharded" || r.Lateness.P99Ms <= 0 {
			t.Errorf("shard %d: run id %q, lateness p99 %v", r.Shard, r.RunID, r.Lateness.P99Ms)
		}
	}
	// Last: on a host too noisy to judge timing it skips the test.
	checkTimingBound(t, fmt.Sprintf("%d shards %v, merged server-side arrival error", shards, perShard), arrivals, stalls, 2, true)
}

// TestShardPlansPartitionTheSchedule: the shards' plans are disjoint, cover
// the full plan at its times, and keep every session on one shard.
func TestShardPlansPartitionTheSchedule(t *testing.T) {
	var reqs []trace.Request
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 600 {
		q := trace.Request{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, TS: t0.Add(time.Duration(i) * 100 * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: 10, OutputTokens: 2, API: trace.APIChat}}
		if i%3 == 0 { // 200 requests in 40 sessions of 5 turns
			q.SessionID, q.Turn = "s"+strconv.Itoa(i%40), int32(i/120)
		}
		reqs = append(reqs, q)
	}
	full, err := collectPlan(reqs, &Options{Schedule: Schedule{Speed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]int64{}
	for _, p := range full {
		at[p.req.RequestID] = p.scheduledNs
	}
	seen := map[string]int32{}
	sessionShard := map[string]int32{}
	for i := range int32(3) {
		plan, err := collectPlan(reqs, &Options{Schedule: Schedule{Speed: 1, Shard: i, ShardCount: 3}})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range plan {
			id := p.req.RequestID
			if prev, dup := seen[id]; dup {
				t.Fatalf("request %s on shards %d and %d", id, prev, i)
			}
			seen[id] = i
			if p.scheduledNs != at[id] {
				t.Errorf("request %s at %d on its shard, %d in the full schedule", id, p.scheduledNs, at[id])
			}
			if s := p.req.SessionID; s != "" {
				if prev, ok := sessionShard[s]; ok && prev != i {
					t.Fatalf("session %s split over shards %d and %d", s, prev, i)
				}
				sessionShard[s] = i
			}
		}
	}
	if len(seen) != len(full) {
		t.Errorf("the shards cover %d of %d requests", len(seen), len(full))
	}
	for _, bad := range []string{"4/4", "-1/2", "1", "a/b", "0/0"} {
		if _, _, err := ParseShard(bad); err == nil {
			t.Errorf("ParseShard(%q) accepted", bad)
		}
	}
}
