package synth

import (
	"math"

	"github.com/servetrace/servetrace/trace"
)

// graphSample is what validation reads of a side's agent graphs, measured
// as the fit measures them (graphFitter): each parent's fan-out width
// (its children within the side), each child's wait after its latest
// parent and its input growth over its first parent's input and output.
type graphSample struct {
	nodes         map[string]*graphSampleNode
	delay, growth []float64
}

type graphSampleNode struct {
	ts       float64
	in, out  int64
	children int
}

func (s *graphSample) add(r *trace.Request) {
	if r.SessionID == "" {
		return
	}
	if s.nodes == nil {
		s.nodes = map[string]*graphSampleNode{}
	}
	t := float64(r.TS) / 1e6
	s.nodes[r.RequestID] = &graphSampleNode{ts: t, in: r.InputTokens, out: r.OutputTokens}
	var first *graphSampleNode
	latest := math.Inf(-1)
	for _, id := range r.ParentIDs {
		p := s.nodes[id]
		if p == nil {
			continue
		}
		p.children++
		if first == nil {
			first = p
		}
		latest = max(latest, p.ts)
	}
	if first == nil {
		return
	}
	delay := t - latest
	if r.ToolMs != nil || r.ThinkTimeMs != nil {
		delay = 0
		if r.ToolMs != nil {
			delay += *r.ToolMs / 1000
		}
		if r.ThinkTimeMs != nil {
			delay += *r.ThinkTimeMs / 1000
		}
	}
	s.delay = append(s.delay, min(max(delay, 0), MaxThinkS))
	s.growth = append(s.growth, float64(r.InputTokens-first.in-first.out))
}

// fanouts returns the children of each request that has any.
func (s *graphSample) fanouts() []float64 {
	var out []float64
	for _, n := range s.nodes {
		if n.children > 0 {
			out = append(out, float64(n.children))
		}
	}
	return out
}
