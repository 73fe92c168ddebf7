package analyze

import "maps"

// windowGauges carries each endpoint's latest scrape through the windows
// of a time series: a window shows the gauges of each endpoint's last
// scrape in it (an engine and a GPU exporter scrape apart), and the engine
// counters' rise since that endpoint's last scrape before the window.
type windowGauges struct {
	latest map[string]*scrape // by source
	before map[string]*scrape // latest at the previous window's end
	inWin  map[string]bool    // sources scraped in the current window
}

func newWindowGauges() *windowGauges {
	return &windowGauges{latest: map[string]*scrape{}, before: map[string]*scrape{}, inWin: map[string]bool{}}
}

// take records a scrape taken within the current window.
func (g *windowGauges) take(s *scrape) { g.latest[s.source], g.inWin[s.source] = s, true }

// fill sets the window's gauges and counter rises, then closes it.
func (g *windowGauges) fill(win *Window) {
	var running, waiting, kv, util, power, fb, preempt, hits, queries float64
	var hasRunning, hasWaiting, hasKV, hasPower, hasFB, hasPreempt, hasPrefix bool
	gpus := 0
	var phaseSum, phaseCount [4]float64
	for src := range g.inWin {
		s := g.latest[src]
		if s.hasRunning {
			running, hasRunning = running+s.running, true
		}
		if s.hasWaiting {
			waiting, hasWaiting = waiting+s.waiting, true
		}
		if s.hasKV {
			kv, hasKV = max(kv, s.kvUsed), true
		}
		if s.gpus > 0 {
			util, gpus = util+s.gpuUtil, gpus+s.gpus
		}
		if s.hasPower {
			power, hasPower = power+s.powerW, true
		}
		if s.hasFB {
			fb, hasFB = fb+s.fbUsedMiB, true
		}
		// Counter rises need a scrape before this window from the same
		// endpoint, and one inside it.
		if b, ok := g.before[src]; ok {
			if s.hasPreemptions && b.hasPreemptions && s.preemptions >= b.preemptions {
				preempt, hasPreempt = preempt+s.preemptions-b.preemptions, true
			}
			if s.hasPrefix && b.hasPrefix && s.prefixQueries > b.prefixQueries {
				hits, queries, hasPrefix = hits+s.prefixHits-b.prefixHits, queries+s.prefixQueries-b.prefixQueries, true
			}
			for i := range phaseSum {
				// A histogram that went back (an engine restart) says nothing.
				if s.hasPhase[i] && b.hasPhase[i] && s.phaseCount[i] > b.phaseCount[i] && s.phaseSum[i] >= b.phaseSum[i] {
					phaseSum[i] += s.phaseSum[i] - b.phaseSum[i]
					phaseCount[i] += s.phaseCount[i] - b.phaseCount[i]
				}
			}
		}
	}
	if hasRunning {
		win.Running = new(running)
	}
	if hasWaiting {
		win.Waiting = new(waiting)
	}
	if hasKV {
		win.KVUsage = new(kv)
	}
	if gpus > 0 {
		win.GPUUtilPct = new(util / float64(gpus))
	}
	if hasPower {
		win.GPUPowerW = new(power)
	}
	if hasFB {
		win.GPUMemUsedMiB = new(fb)
	}
	if hasPreempt {
		win.Preemptions = new(preempt)
	}
	if hasPrefix {
		win.PrefixHitRate = new(hits / queries)
	}
	for i, dst := range []**float64{&win.AggQueueMs, &win.AggPrefillMs, &win.AggDecodeMs, &win.AggE2EMs} {
		if phaseCount[i] > 0 {
			*dst = new(1e3 * phaseSum[i] / phaseCount[i])
		}
	}
	g.before = maps.Clone(g.latest)
	clear(g.inWin)
}
