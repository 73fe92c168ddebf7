package analyze

import (
	"maps"
	"slices"

	"github.com/servetrace/servetrace/internal/loghist"
	"github.com/servetrace/servetrace/trace"
)

// streamGroupCap is how many values of a dimension a streamed breakdown
// keeps apart: each costs a histogram per metric, and a dimension such as
// tenant can have millions of values. Values first seen after the cap are
// pooled into "(other)" with the smallest groups.
var streamGroupCap = 256

// groupMetricNames are the metrics a breakdown reports, as breakdown does.
var groupMetricNames = [4]string{"ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"}

// groupAcc accumulates one group of a streamed breakdown.
type groupAcc struct {
	rows, counted, ok int
	outTok            int64
	hists             [4]loghist.Hist // ns, by groupMetricNames
	moments           [4]moments      // ms
	cache             cacheTally
}

func (g *groupAcc) merge(o *groupAcc) {
	g.rows, g.counted, g.ok, g.outTok = g.rows+o.rows, g.counted+o.counted, g.ok+o.ok, g.outTok+o.outTok
	g.cache.merge(&o.cache)
	for k := range g.hists {
		g.hists[k].Merge(&o.hists[k])
		g.moments[k].merge(o.moments[k])
	}
}

// rowValues are the breakdown metrics of the row addRow last handed the
// sink: what a group adds.
type rowValues struct {
	ms    [3]float64 // ttft, tpot, e2e
	ns    [3]int64   // the same, in ns
	has   [3]bool
	times []int64 // token times, two or more
}

// capture keeps the value of metric m (ns and ms) for the row's groups.
func (r *rowValues) capture(m metricID, ns int64, ms float64) {
	k := -1
	switch m {
	case mTTFT:
		k = 0
	case mTPOT:
		k = 1
	case mE2E:
		k = 2
	}
	if k >= 0 {
		r.ns[k], r.ms[k], r.has[k] = ns, ms, true
	}
}

// groupsAcc is one dimension's streamed breakdown.
type groupsAcc struct {
	dim      string
	byKey    map[string]*groupAcc
	overflow groupAcc // values first seen past streamGroupCap
}

// add adds row i of c, whose metrics are row, to each of its groups.
func (g *groupsAcc) add(c *resultColumns, i int, row *rowValues) {
	if g.dim != "feature" { // one group: no slice of keys per row
		g.addTo(groupKey(c, g.dim, i), c, i, row)
		return
	}
	for _, k := range groupKeys(c, g.dim, i) {
		g.addTo(k, c, i, row)
	}
}

// addTo adds row i of c to the group of key k.
func (g *groupsAcc) addTo(k string, c *resultColumns, i int, row *rowValues) {
	acc := g.byKey[k]
	if acc == nil {
		if len(g.byKey) < streamGroupCap && k != otherValue { // values pooled at read stay pooled
			acc = &groupAcc{}
			g.byKey[k] = acc
		} else {
			acc = &g.overflow
		}
	}
	acc.rows++
	acc.cache.add(c, i)
	if c.warmup[i] {
		return
	}
	acc.counted++
	if c.outcome[i] == trace.OutcomeOK {
		acc.ok++
		if c.sent[i] != null && c.done[i] != null {
			acc.outTok += c.observedOut[i]
		}
	}
	for m, has := range row.has {
		if has {
			acc.hists[m].Add(row.ns[m])
			acc.moments[m].add(row.ms[m])
		}
	}
	for j := 1; j < len(row.times); j++ {
		gap := row.times[j] - row.times[j-1]
		acc.hists[3].Add(gap)
		acc.moments[3].add(nsToMs(gap))
	}
}

// groups is the breakdown, ordered and pooled as breakdown orders and
// pools held rows: the groups past maxGroups, and any past the cap, are
// "(other)".
func (g *groupsAcc) groups(opts Options, spanS float64) []Group {
	keys := slices.Collect(maps.Keys(g.byKey))
	orderGroupKeys(keys, g.dim, func(k string) int { return g.byKey[k].rows })
	accs := make([]*groupAcc, len(keys))
	for i, k := range keys {
		accs[i] = g.byKey[k]
	}
	if len(keys) > maxGroups || g.overflow.rows > 0 {
		keep := min(len(keys), maxGroups-1)
		other := &groupAcc{}
		for _, a := range accs[keep:] {
			other.merge(a)
		}
		other.merge(&g.overflow)
		keys, accs = append(keys[:keep], "(other)"), append(accs[:keep], other)
	}
	out := make([]Group, 0, len(keys))
	for i, k := range keys {
		a := accs[i]
		grp := newGroup(k, a.counted, a.ok, a.outTok, spanS)
		grp.PrefixCacheHit = a.cache.share()
		for m, name := range groupMetricNames {
			if a.moments[m].n > 0 {
				grp.Metrics[name] = histSummary(&a.hists[m], a.moments[m], opts.Percentiles)
			}
		}
		out = append(out, grp)
	}
	return out
}
