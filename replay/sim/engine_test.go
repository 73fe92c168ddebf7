package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/servetrace/servetrace/tokenize"
)

// startEngine serves a simulator with the given cost model and returns its
// URL and the server, for white-box checks.
func startEngine(t *testing.T, cost CostModel, mod func(*Options)) (string, *Server) {
	t.Helper()
	o := DefaultOptions()
	o.Engine.Cost = cost
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs.URL, s
}

// startGatedEngine is startEngine behind a gate that holds each completion
// request until n have arrived, then lets them all through at once, so a
// test of what happens when requests meet in the engine does not depend on
// how the client's goroutines were scheduled.
func startGatedEngine(t *testing.T, cost CostModel, mod func(*Options), n int) (string, *Server) {
	t.Helper()
	o := DefaultOptions()
	o.Engine.Cost = cost
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	arrived := 0
	open := make(chan struct{})
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			mu.Lock()
			if arrived++; arrived == n {
				close(open)
			}
			mu.Unlock()
			select {
			case <-open:
			case <-r.Context().Done():
				return
			case <-time.After(30 * time.Second):
				writeError(w, http.StatusGatewayTimeout, "test_gate", fmt.Sprintf("the gate waited 30 s for %d requests", n))
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv.URL, s
}

// ttftOf sends one streaming completion with a prompt of n tokens (unique
// unless seed repeats) and returns the time to the first content event.
func ttftOf(t *testing.T, url string, pb *tokenize.PromptBuilder, n int, seed uint64) time.Duration {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": DefaultModel, "prompt": pb.Build(n, nil, seed), "max_tokens": 2, "stream": true})
	start := time.Now()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"text":"`) && !strings.Contains(sc.Text(), `"text":""`) {
			d := time.Since(start)
			io.Copy(io.Discard, resp.Body)
			return d
		}
	}
	t.Fatalf("no token in the stream (status %d)", resp.StatusCode)
	return 0
}

func promptBuilder(t *testing.T) *tokenize.PromptBuilder {
	tok, _ := tokenize.Get(tokenize.CL100K)
	pb, err := tokenize.NewPromptBuilder(tok, 16)
	if err != nil {
		t.Fatal(err)
	}
	return pb
}

// TestTimingPrefillSlope sends unique prompts of 8 sizes one at a time and
// fits TTFT against prompt length: the slope is the cost model's prefill
// cost per token, within 5%.
func TestTimingPrefillSlope(t *testing.T) {
	if raceEnabled {
		t.Skip("timing figures are distorted by -race; run by make test-timing")
	}
	const slope = 200 * time.Microsecond
	url, _ := startEngine(t, CostModel{IterBase: 5 * time.Millisecond, PerPrefillToken: slope}, nil)
	pb := promptBuilder(t)
	var xs, ys []float64
	for i, n := range []int{250, 500, 1000, 1500, 2000, 2500, 3000, 4000} {
		d := ttftOf(t, url, pb, n, uint64(100+i))
		xs, ys = append(xs, float64(n)), append(ys, float64(d))
	}
	b, a := fitLine(xs, ys)
	t.Logf("TTFT = %.2f ms + %.1f µs/token (cost model: 5 ms + 200 µs/token)", a/1e6, b/1e3)
	if rel := b/float64(slope) - 1; rel < -0.05 || rel > 0.05 {
		t.Errorf("fitted prefill slope %.1f µs/token, want 200 ± 5%%", b/1e3)
	}
}

// fitLine returns the least-squares slope and intercept of y on x.
func fitLine(xs, ys []float64) (slope, intercept float64) {
	var mx, my float64
	for i := range xs {
		mx += xs[i] / float64(len(xs))
		my += ys[i] / float64(len(ys))
	}
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	slope = sxy / sxx
	return slope, my - slope*mx
}

// scrape returns the simulator's metrics parsed by Prometheus's own parser.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse with expfmt: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestTimingPrefixCacheSkipsPrefill sends one long prompt twice: the second
// TTFT is shorter by the prefill of the cached blocks, and the prefix-cache
// hit counter rises by exactly those tokens.
func TestTimingPrefixCacheSkipsPrefill(t *testing.T) {
	if raceEnabled {
		t.Skip("timing figures are distorted by -race; run by make test-timing")
	}
	const slope = 200 * time.Microsecond
	url, _ := startEngine(t, CostModel{IterBase: 5 * time.Millisecond, PerPrefillToken: slope}, nil)
	pb := promptBuilder(t)
	const n = 3000
	first := ttftOf(t, url, pb, n, 42)
	before := scrape(t, url)
	second := ttftOf(t, url, pb, n, 42)
	after := scrape(t, url)
	hits := after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
	wantHits := float64((n - 1) / 16 * 16) // every full block but the one holding the last token
	if hits != wantHits {
		t.Errorf("prefix cache hits rose by %.0f tokens, want exactly %.0f", hits, wantHits)
	}
	if q := after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]; q != n {
		t.Errorf("prefix cache queries rose by %.0f, want %d", q, n)
	}
	saved, want := first-second, time.Duration(wantHits)*slope
	t.Logf("TTFT %v then %v: saved %v, cost model says %v", first, second, saved, want)
	if rel := float64(saved)/float64(want) - 1; rel < -0.05 || rel > 0.05 {
		t.Errorf("the repeat saved %v of TTFT, want %v ± 5%%", saved, want)
	}
}

// TestCancelledStreamsFreeEverything opens 100 streams, cancels them mid-way,
// and checks that once the server has noticed, nothing is running or
// referenced and every stream counts as aborted, in the engine and in
// /metrics.
func TestCancelledStreamsFreeEverything(t *testing.T) {
	const iter = 10 * time.Millisecond
	url, s := startEngine(t, CostModel{IterBase: iter}, nil)
	pb := promptBuilder(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var started sync.WaitGroup
	started.Add(100)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	for i := range 100 {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"model": DefaultModel, "prompt": pb.Build(100, nil, uint64(i)), "max_tokens": 1000, "stream": true})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(string(body)))
			resp, err := client.Do(req)
			if err != nil {
				started.Done()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			got := 0
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data: ") {
					if got++; got == 3 {
						started.Done()
					}
				}
			}
		})
	}
	started.Wait() // every stream has tokens flowing
	if st := s.engine.snapshot(); st.running != 100 {
		t.Fatalf("%d running before the cancel, want 100", st.running)
	}
	cancel()
	// The server learns of each closed socket on its own schedule (under
	// -race on a busy machine, seconds after the cancel), and each handler
	// aborts its sequence in the engine before it counts the abort in
	// /metrics: wait for both to settle. The deadline only fails a leak.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.engine.snapshot()
		if st.running == 0 && st.waiting == 0 && s.engine.referencedBlocks() == 0 && st.aborted == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after cancelling: %d running, %d waiting, %d blocks referenced, %d aborted; want 0, 0, 0, 100",
				st.running, st.waiting, s.engine.referencedBlocks(), st.aborted)
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for {
		m := scrape(t, url)
		if m["vllm:request_aborted_total"] == 100 && m["vllm:num_requests_running"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics 10 s after the engine settled: aborted %v, running %v; want 100, 0", m["vllm:request_aborted_total"], m["vllm:num_requests_running"])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueueFullAnswers429 fills a tiny engine and checks the refusal. The
// ten requests are held at the server until all have arrived, so they reach
// the engine at once however the client's goroutines were scheduled.
func TestQueueFullAnswers429(t *testing.T) {
	const n = 10
	url, _ := startGatedEngine(t, CostModel{IterBase: 50 * time.Millisecond}, func(o *Options) {
		o.Engine.MaxNumSeqs, o.Engine.MaxWaiting = 1, 2
	}, n)
	var wg sync.WaitGroup
	codes := make(chan int, n)
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"servetrace-sim","prompt":"hi","max_tokens":20}`))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	close(errs)
	for err := range errs {
		t.Errorf("request got no answer: %v", err)
	}
	count, answered := map[int]int{}, 0
	for c := range codes {
		count[c]++
		answered++
	}
	// One running (for 20 iterations of 50 ms) and two waiting at most: of
	// 10 arriving at once, most are refused.
	if count[429] < 5 || count[200] < 1 || count[200]+count[429] != answered {
		t.Errorf("status counts %v, want mostly 429 and a few 200", count)
	}
}

// TestPreemptionWhenTheCacheRunsOut gives the engine too few blocks for all
// its decodes: it preempts, recomputes, and still finishes every request
// with the full output.
func TestPreemptionWhenTheCacheRunsOut(t *testing.T) {
	// The requests are held at the server until all 8 have arrived, and each
	// lives at least 60 iterations of 5 ms, so they overlap in the engine
	// however the client's goroutines were scheduled: 5 running at once are
	// enough to outgrow the cache.
	url, s := startGatedEngine(t, CostModel{IterBase: 5 * time.Millisecond}, func(o *Options) {
		o.Engine.KVBlocks, o.Engine.BlockSize = 40, 16 // 640 tokens for 8 requests of 100 + 60
	}, 8)
	pb := promptBuilder(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"model": DefaultModel, "prompt": pb.Build(100, nil, uint64(i)), "max_tokens": 60})
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var out struct {
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			json.NewDecoder(resp.Body).Decode(&out)
			if resp.StatusCode != 200 || out.Usage.CompletionTokens != 60 {
				errs <- fmt.Errorf("status %d, %d tokens", resp.StatusCode, out.Usage.CompletionTokens)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := idleStats(t, s.engine)
	if st.preemptions == 0 {
		t.Error("no preemption with a cache too small for every decode")
	}
	if st.usedBlocks != 0 {
		t.Errorf("%d blocks still referenced once the engine was idle", st.usedBlocks)
	}
}

// idleStats waits until the engine has published an idle state (nothing
// running or waiting) and returns it. The engine sends a sequence's last
// token before it retires the sequence and republishes its gauges, so a
// client can read its whole response before the engine has freed the
// blocks: only the idle state tells a leak from that lag.
func idleStats(t *testing.T, e *engine) engineStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.snapshot()
		if st.running == 0 && st.waiting == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle 10 s after every response: %d running, %d waiting", st.running, st.waiting)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDropRepublishesTheGauges: a sequence dropped while the engine has
// nothing else to do must show in the published gauges at once. Both
// sequences are marked aborted first, so the engine retires them without
// freeing; their drops then arrive in its idle wait, apart.
func TestDropRepublishesTheGauges(t *testing.T) {
	e := newEngine(EngineOptions{Cost: CostModel{IterBase: time.Millisecond}, MaxNumBatchedTokens: 1024, MaxNumSeqs: 8, KVBlocks: 256, BlockSize: 16, MaxWaiting: 8})
	defer e.stop()
	seqs := []*seq{{id: 1, promptLen: 40, maxTokens: 1000, stopAt: 1000}, {id: 2, promptLen: 40, maxTokens: 1000, stopAt: 1000}}
	for _, s := range seqs {
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range seqs {
		<-s.out.ready // each has its first token: both are running
		s.aborted.Store(true)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.snapshot().running != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the engine never retired the aborted sequences")
		}
		time.Sleep(time.Millisecond)
	}
	for _, s := range seqs {
		e.abortC <- s
		time.Sleep(3 * time.Millisecond)
	}
	for e.snapshot().aborted != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the drops were never counted")
		}
		time.Sleep(time.Millisecond)
	}
	if st := e.snapshot(); st.usedBlocks != 0 || st.kvUsage != 0 {
		t.Errorf("after both drops: %d blocks, KV usage %.2f published; want 0", st.usedBlocks, st.kvUsage)
	}
}
