package replay

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// planned is one request of the schedule.
type planned struct {
	req         *trace.Request
	scheduledNs int64
	warmup      bool
	// next is the plan index of this session's next turn, or -1. A turn
	// that follows another (chained) is sent when the earlier one is done,
	// plus its think time, not by the scheduler.
	next    int
	chained bool
}

// buildPlan turns the workload (in ts order) into the schedule: an optional
// window with its lead-in, send offsets from the workload's timing (scaled by
// Speed) or from an arrival process at Rate, cut by Duration and
// MaxRequests, the first part marked warmup.
func buildPlan(reqs []trace.Request, o *Options) ([]planned, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	first := reqs[0].TS
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	var err error
	if o.From != "" {
		if lo, err = parseInstant("From", o.From, first); err != nil {
			return nil, err
		}
	}
	if o.To != "" {
		if hi, err = parseInstant("To", o.To, first); err != nil {
			return nil, err
		}
	}
	if hi <= lo {
		return nil, opterr.New("To", o.To, "must be after From (%s)", o.From)
	}
	leadFrom := lo
	if o.LeadIn > 0 && lo > math.MinInt64+o.LeadIn.Microseconds() {
		leadFrom = lo - o.LeadIn.Microseconds()
	}
	var window []*trace.Request
	for i := range reqs {
		if ts := reqs[i].TS; ts >= leadFrom && ts < hi {
			window = append(window, &reqs[i])
		}
	}
	if len(window) == 0 {
		return nil, opterr.New("From", o.From, "no request of the workload falls between From and To (the workload spans %s to %s)",
			time.UnixMicro(first).UTC().Format(time.RFC3339), time.UnixMicro(reqs[len(reqs)-1].TS).UTC().Format(time.RFC3339))
	}

	offsets := make([]int64, len(window))
	if o.Rate > 0 {
		arrivals(offsets, o.Rate, o.Arrival, o.Burstiness, o.Seed)
	} else {
		t0 := window[0].TS
		for i, q := range window {
			offsets[i] = satNs((float64(q.TS) - float64(t0)) * 1000 / o.Speed)
		}
	}
	plan := make([]planned, 0, len(window))
	for i, q := range window {
		// Closed loop ignores offsets; its duration is enforced at run time.
		if o.Duration > 0 && o.Concurrency == 0 && offsets[i] >= int64(o.Duration) {
			break
		}
		if o.MaxRequests > 0 && len(plan) >= o.MaxRequests {
			break
		}
		warm := q.TS < lo || // lead-in before the window
			(o.WarmupRequests > 0 && len(plan) < o.WarmupRequests) ||
			(o.WarmupDuration > 0 && offsets[i] < int64(o.WarmupDuration))
		plan = append(plan, planned{req: q, scheduledNs: offsets[i], warmup: warm, next: -1})
	}
	if o.ShardCount > 1 {
		// The full schedule is built identically on every shard; each keeps
		// its part, at the full schedule's times.
		mine := plan[:0]
		for _, p := range plan {
			if shardOf(p.req, o.ShardCount) == o.Shard {
				mine = append(mine, p)
			}
		}
		plan = mine
	}
	linkSessions(plan)
	return plan, nil
}

// linkSessions chains the turns of each multi-turn session in the plan, in
// turn order: the first follows the schedule, each later one is chained.
func linkSessions(plan []planned) {
	bySession := map[string][]int{}
	for i := range plan {
		if id := plan[i].req.SessionID; id != "" {
			bySession[id] = append(bySession[id], i)
		}
	}
	for _, idx := range bySession {
		if len(idx) < 2 {
			continue
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Or(cmp.Compare(plan[a].req.Turn, plan[b].req.Turn), cmp.Compare(plan[a].req.TS, plan[b].req.TS))
		})
		for k := 0; k+1 < len(idx); k++ {
			plan[idx[k]].next = idx[k+1]
			plan[idx[k+1]].chained = true
		}
	}
}

// arrivals fills offsets (ns, from 0) with an arrival process at rate per
// second: exponential gaps (poisson), gamma gaps of the given shape and the
// same mean (CV = 1/sqrt(shape), as vLLM's bench), or constant gaps. The
// first request goes at 0.
func arrivals(offsets []int64, rate float64, kind Arrival, shape float64, seed uint64) {
	src := rand.NewPCG(seed, 0xa441)
	var gap func() float64
	switch kind {
	case ArrivalConstant:
		gap = func() float64 { return 1 / rate }
	case ArrivalGamma:
		g := distuv.Gamma{Alpha: shape, Beta: shape * rate, Src: src}
		gap = g.Rand
	default:
		e := distuv.Exponential{Rate: rate, Src: src}
		gap = e.Rand
	}
	t := 0.0
	for i := range offsets {
		if i > 0 {
			t += gap()
		}
		offsets[i] = satNs(t * 1e9)
	}
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
