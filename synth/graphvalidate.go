package synth

import (
	"math"
	"slices"

	"github.com/servetrace/servetrace/trace"
)

// graphSample is what validation reads of a side's agent graphs, measured
// as the fit measures them (graphNodes, graphFitter.close): over the
// sessions where a request names a parent of its session, each request's
// fan-out width (its children, when it has any), each later request's
// wait after its parents and its input growth over its first parent.
type graphSample struct {
	sessions map[string]*graphSession
	order    []string
}

type graphSession struct {
	nodes graphNodes
	graph bool
}

func (s *graphSample) add(r *trace.Request) {
	if r.SessionID == "" {
		return
	}
	if s.sessions == nil {
		s.sessions = map[string]*graphSession{}
	}
	g := s.sessions[r.SessionID]
	if g == nil {
		g = &graphSession{}
		s.sessions[r.SessionID] = g
		s.order = append(s.order, r.SessionID)
	}
	explicit, _ := g.nodes.add(r, float64(r.TS)/1e6)
	g.graph = g.graph || explicit
}

// laws returns the fan-out widths, waits and growths of the side's agent
// graphs, and each graph's depth (the most requests on a path from its
// first), sessions past maxGraphNodes left out, as the fit leaves them.
func (s *graphSample) laws() (fanouts, waits, growths, depths []float64) {
	for _, id := range s.order {
		g := s.sessions[id]
		if !g.graph || g.nodes.tooLong {
			continue
		}
		n := &g.nodes
		depths = append(depths, float64(graphDepth(n.parents)))
		for i, c := range childrenOf(n.parents) {
			if len(c) > 0 {
				fanouts = append(fanouts, float64(len(c)))
			}
			if i > 0 && !math.IsNaN(n.wait[i]) {
				waits = append(waits, n.wait[i])
				growths = append(growths, n.grow[i])
			}
		}
	}
	return slices.Clip(fanouts), waits, growths, depths
}

// graphDepth is the most requests on a path through the graph: parents
// come before their children, so one pass in order finds it.
func graphDepth(parents [][]int32) int {
	depth := make([]int, len(parents))
	most := 0
	for i, ps := range parents {
		depth[i] = 1
		for _, p := range ps {
			depth[i] = max(depth[i], depth[p]+1)
		}
		most = max(most, depth[i])
	}
	return most
}
