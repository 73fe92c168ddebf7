package peer

import (
	"encoding/json"
	"sort"
)

// statOrder is the order in which a metric object's statistics are
// listed: AIPerf and GenAI-Perf write {unit, avg, p1 … p99, min, max, std}.
var statOrder = []string{"avg", "min", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "max", "std"}

// metricObject is one metric of an AIPerf or GenAI-Perf summary: its
// unit and statistics, each optional.
type metricObject struct {
	Unit  string
	Stats map[string]float64
}

// metricObjects collects the object-valued fields of a summary that hold
// a unit and at least one number: the metrics.
func metricObjects(o object) map[string]metricObject {
	out := map[string]metricObject{}
	for _, k := range o.keys {
		raw := o.raw(k)
		if len(raw) == 0 || raw[0] != '{' {
			continue
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		var unit string
		if json.Unmarshal(m["unit"], &unit) != nil {
			continue
		}
		mo := metricObject{Unit: unit, Stats: map[string]float64{}}
		for s, v := range m {
			if x, ok := number(v); s != "unit" && ok {
				mo.Stats[s] = x
			}
		}
		if len(mo.Stats) > 0 {
			out[k] = mo
		}
	}
	return out
}

// isMetricSummary reports whether obj's named fields are metric objects
// (objects with a unit), as AIPerf and GenAI-Perf summaries are.
func isMetricSummary(o object, names ...string) bool {
	ms := metricObjects(o)
	for _, n := range names {
		if _, ok := ms[n]; !ok {
			return false
		}
	}
	return true
}

// metricFigures flattens metric objects into figures named metric.stat
// ("time_to_first_token.p99"), metrics in name order, statistics in
// statOrder.
func metricFigures(ms map[string]metricObject) []Figure {
	names := make([]string, 0, len(ms))
	for n := range ms {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Figure
	for _, n := range names {
		m := ms[n]
		for _, s := range statOrder {
			if v, ok := m.Stats[s]; ok {
				out = append(out, Figure{Name: n + "." + s, Value: v, Unit: m.Unit})
			}
		}
	}
	return out
}

// stat returns a metric's statistic, and whether the summary has it.
func stat(ms map[string]metricObject, metric, s string) (float64, bool) {
	m, ok := ms[metric]
	if !ok {
		return 0, false
	}
	v, ok := m.Stats[s]
	return v, ok
}
