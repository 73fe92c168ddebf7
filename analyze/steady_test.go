package analyze

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// queueRunOf is a FIFO server offered arrivals at rate for span,
// starting idle, seeded: Poisson arrivals, or evenly spaced with
// constant; service times exponential of mean service (M/M/1) or, with
// fixed, all equal to it (M/D/1, as the simulator's cost model serves).
// Its capacity is 1/service.
func queueRunOf(seed uint64, service time.Duration, fixed bool, rate float64, span time.Duration) []trace.Result {
	return queueRunArrivals(seed, service, fixed, false, rate, span)
}

func queueRunArrivals(seed uint64, service time.Duration, fixed, constant bool, rate float64, span time.Duration) []trace.Result {
	rng := rand.New(rand.NewPCG(seed, 11))
	var rows []trace.Result
	var t, free float64
	for {
		if constant {
			t += 1 / rate
		} else {
			t += rng.ExpFloat64() / rate
		}
		if t >= span.Seconds() {
			return rows
		}
		start := max(t, free)
		d := service.Seconds()
		if !fixed {
			d *= rng.ExpFloat64()
		}
		free = start + d
		sent, first, done := int64(t*1e9), int64(start*1e9)+1e6, int64(free*1e9)+2e6
		rows = append(rows, trace.Result{ScheduledNs: sent, AdmittedNs: sent, SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first,
			DoneNs: &done, TokenTimesNs: []int64{first - sent, done - sent}, ObservedOutputTokens: 2, Outcome: trace.OutcomeOK,
			Shape: trace.Shape{Stream: true}})
	}
}

// TestSteadinessTellsAGrowingQueue: against a server of 20 req/s, a
// 5-second step at 1.3 times its capacity meets an SLO of TTFT ≤ 2 s for
// 90% of requests (its queue has not reached it yet). With evenly spaced
// arrivals it must fail as not steady; with Poisson arrivals in at least
// 280 of 300 seeds (the queue's growth over 5 s is then a few standard
// deviations of its noise: measured 285). Steps of 20 s at 0.7 times
// capacity, whose queue comes and goes, must be steady in all but 3 of
// 300 seeds with fixed service times (measured 0) and 12 with
// exponential ones (measured 7).
func TestSteadinessTellsAGrowingQueue(t *testing.T) {
	o := EnvelopeOptions{Options: Options{SLO: SLO{TTFT: 2 * time.Second}, TTFTMode: TTFTFirstContent, Percentiles: []float64{50, 99}}, Attainment: 0.9}
	service := 50 * time.Millisecond
	even := stepOf(queueRunArrivals(0, service, true, true, 26, 5*time.Second), o)
	if even.Attainment < 0.9 || even.MeetsSLO || even.Steadiness.Steady || !strings.Contains(even.Steadiness.Reason, "not steady") {
		t.Errorf("1.3× capacity for 5 s, evenly spaced: attainment %.3f, meets %v, steadiness %+v; want the attainment met and the step failed as not steady", even.Attainment, even.MeetsSLO, even.Steadiness)
	}
	var overCaught, underFixed, underExp int
	for seed := range uint64(300) {
		if over := stepOf(queueRunOf(seed, service, true, 26, 5*time.Second), o); !over.Steadiness.Steady && !over.MeetsSLO {
			overCaught++
		}
		if !stepOf(queueRunOf(seed, service, true, 14, 20*time.Second), o).Steadiness.Steady {
			underFixed++
		}
		if !stepOf(queueRunOf(seed, service, false, 14, 20*time.Second), o).Steadiness.Steady {
			underExp++
		}
	}
	if overCaught < 280 || underFixed > 3 || underExp > 12 {
		t.Errorf("1.3× capacity caught in %d of 300 steps (want ≥ 280); 0.7× called not steady in %d (fixed service, want ≤ 3) and %d (exponential, want ≤ 12)", overCaught, underFixed, underExp)
	}
}

// TestSteadinessNeedsEnoughRequests: a step of 10 requests, or one whose
// quarters hold fewer than 5, is not judged: steady, saying why.
func TestSteadinessNeedsEnoughRequests(t *testing.T) {
	o := EnvelopeOptions{Options: Options{TTFTMode: TTFTFirstContent, Percentiles: []float64{50}}, Attainment: 0.9}
	s := stepOf(queueRunOf(1, 50*time.Millisecond, true, 26, 400*time.Millisecond), o)
	if !s.Steadiness.Steady || !strings.Contains(s.Steadiness.Reason, "too few") {
		t.Errorf("%d requests: %+v", s.Counted, s.Steadiness)
	}
}

// TestSteadinessFromWaitingRequests: latencies flat, the engine's waiting
// requests growing over the step (a server that queues before it admits)
// is not steady; waiting requests that stay level are.
func TestSteadinessFromWaitingRequests(t *testing.T) {
	var ttft []timedValue
	for i := range 200 {
		ttft = append(ttft, timedValue{at: int64(i) * 50e6, v: 100 + float64(i%7)})
	}
	for _, c := range []struct {
		grow   float64
		steady bool
	}{{1, false}, {0, true}} {
		var scrapes []scrape
		for k := range 20 {
			scrapes = append(scrapes, scrape{atNs: int64(k) * 500e6, waiting: 2 + c.grow*float64(k), hasWaiting: true})
		}
		s := steadiness(ttft, nil, nil, scrapes)
		if s.Steady != c.steady || s.WaitingEarly == nil {
			t.Errorf("waiting growing %g a scrape: %+v", c.grow, s)
		}
	}
}

// stepOf summarises rows as one step.
func stepOf(rows []trace.Result, o EnvelopeOptions) Step {
	c := columnsOf(rows)
	idx := make([]int32, c.n)
	for i := range idx {
		idx[i] = int32(i)
	}
	return step(c, "s", idx, 0, o, nil)
}
