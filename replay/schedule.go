package replay

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/trace"
)

// planned is one request of the schedule. It is shared by pointer between
// the stream that read it, the prefetcher and the sender (the atomics).
type planned struct {
	req         *trace.Request
	scheduledNs int64
	warmup      bool
	// probe is set on a probe request placed beside a workload request.
	probe *probe.Probe
	// beside is the probe that goes with a request of the agent graph,
	// when it goes, or is recorded not sent with it.
	beside *planned
	// sess, on a request of the agent graph, is the conversation its
	// prompt continues (its parents'), and then its own; node is its
	// place in the graph.
	sess *session
	node *node
	// chained marks a later turn of a session: it is sent when the turn
	// before it is done, plus its think time, not by the scheduler.
	chained bool
	// chain is the session it belongs to in open loop, or nil.
	chain *chain
	// cost is what it holds of the stream's look-ahead budget until sent.
	cost int64
	// The prefetcher's work on it: prefetchNone, … and the body built.
	state atomic.Int32
	built atomic.Pointer[outgoing]
}

// planner turns the workload's requests, read in ts order, into the
// schedule one request at a time: an optional window with its lead-in,
// send offsets from the workload's timing (scaled by Speed) or from an
// arrival process at Rate, cut by Duration and MaxRequests, the first part
// marked warmup, and this shard's part of it. It holds no request, so the
// schedule of a workload of any length streams.
type planner struct {
	o                *Options
	started          bool
	firstTS, lastTS  int64 // of the workload read so far, for errors
	lo, hi, leadFrom int64
	t0               int64 // the first window request's ts
	arrival          *arrivalClock
	planned          int // window requests planned, on every shard
}

func newPlanner(o *Options) *planner { return &planner{o: o} }

// slot is where the schedule puts a request: its send offset and whether
// it is warmup.
type slot struct {
	scheduledNs int64
	warmup      bool
}

// next returns q's slot in the schedule, q being the workload's next
// request. keep is false when q is not scheduled here (before the window,
// or another shard's); stop is true when the schedule is complete and
// nothing after q can join it.
func (pl *planner) next(q *trace.Request) (at slot, keep, stop bool, err error) {
	o := pl.o
	if !pl.started {
		if err := pl.start(q.TS); err != nil {
			return slot{}, false, true, err
		}
	}
	pl.lastTS = q.TS
	if q.TS >= pl.hi {
		return slot{}, false, true, nil
	}
	if q.TS < pl.leadFrom {
		return slot{}, false, false, nil
	}
	var offset int64
	if pl.planned == 0 {
		pl.t0 = q.TS
	}
	if o.Rate > 0 {
		offset = pl.arrival.next()
	} else {
		offset = satNs((float64(q.TS) - float64(pl.t0)) * 1000 / o.Speed)
	}
	// Closed loop ignores offsets; its duration is enforced at run time.
	if o.Duration > 0 && o.Concurrency == 0 && offset >= int64(o.Duration) {
		return slot{}, false, true, nil
	}
	if o.MaxRequests > 0 && pl.planned >= o.MaxRequests {
		return slot{}, false, true, nil
	}
	warm := q.TS < pl.lo || // lead-in before the window
		(o.WarmupRequests > 0 && pl.planned < o.WarmupRequests) ||
		(o.WarmupDuration > 0 && offset < int64(o.WarmupDuration))
	pl.planned++
	// The full schedule is built identically on every shard; each keeps
	// its part, at the full schedule's times.
	if o.ShardCount > 1 && shardOf(q, o.ShardCount) != o.Shard {
		return slot{}, false, false, nil
	}
	return slot{scheduledNs: offset, warmup: warm}, true, false, nil
}

// start reads the window options against the workload's first request.
func (pl *planner) start(first int64) error {
	o := pl.o
	pl.started, pl.firstTS = true, first
	pl.lo, pl.hi = int64(math.MinInt64), int64(math.MaxInt64)
	var err error
	if o.From != "" {
		if pl.lo, err = parseInstant("From", o.From, first); err != nil {
			return err
		}
	}
	if o.To != "" {
		if pl.hi, err = parseInstant("To", o.To, first); err != nil {
			return err
		}
	}
	if pl.hi <= pl.lo {
		return opterr.New("To", o.To, "must be after From (%s)", o.From)
	}
	pl.leadFrom = pl.lo
	if o.LeadIn > 0 && pl.lo > math.MinInt64+o.LeadIn.Microseconds() {
		pl.leadFrom = pl.lo - o.LeadIn.Microseconds()
	}
	if o.Rate > 0 {
		pl.arrival = newArrivalClock(o.Rate, o.Arrival, o.Burstiness, o.Seed)
	}
	return nil
}

// end returns the error for a schedule that planned nothing.
func (pl *planner) end() error {
	if !pl.started {
		return nil
	}
	if pl.planned == 0 {
		return opterr.New("From", pl.o.From, "no request of the workload falls between From and To (the workload spans %s to %s)",
			time.UnixMicro(pl.firstTS).UTC().Format(time.RFC3339), time.UnixMicro(pl.lastTS).UTC().Format(time.RFC3339))
	}
	return nil
}

// arrivalClock gives the send offsets (ns, from 0) of an arrival process at
// rate per second: exponential gaps (poisson), gamma gaps of the given
// shape and the same mean (CV = 1/sqrt(shape), as vLLM's bench), or
// constant gaps. The first request goes at 0.
type arrivalClock struct {
	gap   func() float64
	t     float64
	first bool
}

func newArrivalClock(rate float64, kind Arrival, shape float64, seed uint64) *arrivalClock {
	src := rand.NewPCG(seed, 0xa441)
	a := &arrivalClock{first: true}
	switch kind {
	case ArrivalConstant:
		a.gap = func() float64 { return 1 / rate }
	case ArrivalGamma:
		g := distuv.Gamma{Alpha: shape, Beta: shape * rate, Src: src}
		a.gap = g.Rand
	default:
		e := distuv.Exponential{Rate: rate, Src: src}
		a.gap = e.Rand
	}
	return a
}

// next returns the next arrival's offset.
func (a *arrivalClock) next() int64 {
	if !a.first {
		a.t += a.gap()
	}
	a.first = false
	return satNs(a.t * 1e9)
}

// parseInstant reads an RFC 3339 time or a duration offset from the
// workload's first request, returning microseconds since the epoch; field
// names the option for the error.
func parseInstant(field, s string, firstTS int64) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMicro(), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return firstTS + d.Microseconds(), nil
	}
	return 0, opterr.New(field, s, "give an RFC 3339 time (2024-01-01T10:05:00Z) or an offset from the workload's start (10m)")
}
