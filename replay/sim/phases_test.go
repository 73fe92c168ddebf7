package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestRequestTimesFromEngineClock steps an engine on a fake clock, each
// iteration costing 10 ms, and checks the readings the event finishing a
// request carries: arrival as given, scheduled at the start of the
// iteration that admitted it, the first token at the end of its prefill's
// iteration, the finish at the end of its last choice's, and no readings
// on any other event.
func TestRequestTimesFromEngineClock(t *testing.T) {
	const it = 10 * time.Millisecond
	type req struct {
		max, n int
		want   requestPhases // queue, prefill, decode
	}
	cases := []struct {
		name    string
		maxSeqs int
		reqs    []req
	}{
		{"one running at a time: the second waits out the first", 1, []req{
			{max: 3, n: 1, want: requestPhases{queue: 0, prefill: it, decode: 2 * it}},
			{max: 2, n: 1, want: requestPhases{queue: 3 * it, prefill: it, decode: it}},
		}},
		{"n=3: the request ends with its last choice", 8, []req{
			{max: 4, n: 3, want: requestPhases{queue: 0, prefill: it, decode: 3 * it}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1e9, 0)}
			arrival := clk.now()
			e := newSteppedEngine(EngineOptions{Cost: CostModel{IterBase: it}, MaxNumBatchedTokens: 512, MaxNumSeqs: c.maxSeqs,
				KVBlocks: 64, BlockSize: 16, MaxWaiting: 8}, engineFeatures{}, clk)
			seqs := make([]*seq, len(c.reqs))
			for i, r := range c.reqs {
				seqs[i] = &seq{id: uint64(i + 1), promptLen: 20, maxTokens: r.max, stopAt: r.max, arrival: arrival, n: r.n}
				for range r.n {
					seqs[i].stopAts = append(seqs[i].stopAts, r.max)
				}
				if err := e.submit(seqs[i]); err != nil {
					t.Fatal(err)
				}
			}
			e.drain()
			got := make([]*requestTimes, len(seqs))
			for step := 0; step < 20 && (len(e.running) > 0 || e.waiting.Len() > 0); step++ {
				e.iterate()
				for i, s := range seqs {
					for _, ev := range s.out.take(nil) {
						if ev.times == nil {
							continue
						}
						if got[i] != nil {
							t.Fatalf("request %d: a second event carries its readings", i)
						}
						got[i] = ev.times
					}
				}
			}
			for i, r := range c.reqs {
				if got[i] == nil {
					t.Fatalf("request %d: no event carried its readings", i)
				}
				if got[i].arrival != arrival {
					t.Errorf("request %d: arrival %v, want %v", i, got[i].arrival, arrival)
				}
				p := got[i].phases()
				if p != r.want {
					t.Errorf("request %d: phases %+v, want %+v", i, p, r.want)
				}
				if p.e2e() != got[i].finish.Sub(got[i].arrival) || p.ttft() != got[i].firstToken.Sub(got[i].arrival) {
					t.Errorf("request %d: e2e %v or ttft %v disagree with the readings %+v", i, p.e2e(), p.ttft(), got[i])
				}
			}
		})
	}
}

// TestPhaseLogKeepsTheLatest: past its capacity the log forgets the
// oldest requests, so its memory is bounded however long a server runs.
func TestPhaseLogKeepsTheLatest(t *testing.T) {
	l := newPhaseLog(3)
	for i := range 5 {
		l.add(fmt.Sprintf("cmpl-%d", i), requestPhases{queue: time.Duration(i)})
	}
	for i := range 5 {
		p, ok := l.get(fmt.Sprintf("cmpl-%d", i))
		if want := i >= 2; ok != want || ok && p.queue != time.Duration(i) {
			t.Errorf("cmpl-%d: %+v, %v; want kept %v", i, p, ok, want)
		}
	}
	if len(l.byID) != 3 || len(l.order) != 3 {
		t.Errorf("holds %d ids in %d slots, want 3", len(l.byID), len(l.order))
	}
}
