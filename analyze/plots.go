package analyze

import (
	"bytes"
	"fmt"
	"image/color"
	"maps"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Figure is one plot of a report: an inline SVG and its caption.
type Figure struct {
	Title   string
	Caption string
	SVG     string
}

// Colours, chosen to stay distinct for common colour-vision deficiencies.
var (
	colBlue   = color.RGBA{0, 114, 178, 255}
	colOrange = color.RGBA{230, 159, 0, 255}
	colGreen  = color.RGBA{0, 158, 115, 255}
	colRed    = color.RGBA{213, 94, 0, 255}
	colGrey   = color.RGBA{120, 120, 120, 255}
)

// regionColours shade the time series regions.
var regionColours = map[string]color.NRGBA{
	RegionCold:       {86, 180, 233, 40},
	RegionWarm:       {240, 228, 66, 50},
	RegionSteady:     {0, 0, 0, 0},
	RegionSaturated:  {213, 94, 0, 45},
	RegionRecovering: {204, 121, 167, 40},
}

// svgOf renders a plot as an SVG document body (no XML prolog).
func svgOf(p *plot.Plot, w, h vg.Length) (string, error) {
	wt, err := p.WriterTo(w, h, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	return s, nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

func line(xs, ys []float64, c color.Color, dashed bool) *plotter.Line {
	pts := make(plotter.XYs, len(xs))
	for i := range xs {
		pts[i] = plotter.XY{X: xs[i], Y: ys[i]}
	}
	l, _ := plotter.NewLine(pts)
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	return l
}

// fade returns c at opacity a (non-premultiplied, as the SVG fill needs).
func fade(c color.RGBA, a uint8) color.NRGBA { return color.NRGBA{c.R, c.G, c.B, a} }

// cdfFigure plots a metric's CDF (latency on x, probability on y) with
// its 95% order-statistic band.
func cdfFigure(name string, c Curve, col color.RGBA) (Figure, error) {
	p := newPlot(strings.TrimSuffix(name, "_ms")+" CDF", "ms", "fraction of samples ≤ x")
	bounded := func(i int) bool { return c.Bounded[i] }
	var bx, blo, bhi []float64 // band drawn as latency intervals at each level
	var ys []float64
	for i := range c.P {
		if bounded(i) {
			bx, blo, bhi = append(bx, c.P[i]), append(blo, c.Lo[i]), append(bhi, c.Hi[i])
		}
		ys = append(ys, c.P[i])
	}
	// The band is horizontal (an interval in ms at each level): draw it as
	// a polygon in (ms, p) space.
	if len(bx) > 1 {
		pts := make(plotter.XYs, 0, 2*len(bx))
		for i := range bx {
			pts = append(pts, plotter.XY{X: blo[i], Y: bx[i]})
		}
		for i := len(bx) - 1; i >= 0; i-- {
			pts = append(pts, plotter.XY{X: bhi[i], Y: bx[i]})
		}
		poly, err := plotter.NewPolygon(pts)
		if err != nil {
			return Figure{}, err
		}
		poly.Color, poly.LineStyle.Width = fade(col, 70), 0
		p.Add(poly)
		p.Legend.Add("95% band", poly)
	}
	l := line(c.V, ys, col, false)
	p.Add(l)
	p.Legend.Add(fmt.Sprintf("%s (n %d)", strings.TrimSuffix(name, "_ms"), c.N), l)
	p.Legend.Left, p.Legend.Top = false, false
	p.Y.Min, p.Y.Max = 0, 1
	if slices.Min(c.Lo) > 0 && slices.Max(c.Hi) > 20*slices.Min(c.Lo) {
		// Latencies spanning orders of magnitude read better on a log axis.
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.X.Label.Text = "ms (log scale)"
	}
	svg, err := svgOf(p, 6*vg.Inch, 3.6*vg.Inch)
	return Figure{Title: strings.TrimSuffix(name, "_ms") + " distribution", SVG: svg,
		Caption: "Empirical CDF with the 95% distribution-free (order-statistic) band at each level; where the band stops, the sample cannot bound that percentile from above."}, err
}

// histogramFigure plots the ITL histogram.
func histogramFigure(h Histogram) (Figure, error) {
	p := newPlot("inter-token latency histogram", "ms", "events")
	// A step outline over the bins, filled.
	width := h.Edges[1] - h.Edges[0]
	pts := make(plotter.XYs, 0, 2*len(h.Counts)+2)
	for i, c := range h.Counts {
		pts = append(pts, plotter.XY{X: h.Edges[i], Y: float64(c)}, plotter.XY{X: h.Edges[i] + width, Y: float64(c)})
	}
	step, err := plotter.NewLine(pts)
	if err != nil {
		return Figure{}, err
	}
	step.Color, step.Width = colBlue, vg.Points(1.2)
	step.FillColor = fade(colBlue, 90)
	p.Add(step)
	svg, err := svgOf(p, 6*vg.Inch, 3.2*vg.Inch)
	caption := fmt.Sprintf("Gaps between token events, %d bins up to p99.9", len(h.Counts))
	if h.Overflow > 0 {
		caption += fmt.Sprintf("; %d gaps above it are not drawn", h.Overflow)
	}
	return Figure{Title: "inter-token latency", SVG: svg, Caption: caption + "."}, err
}

// regionShading draws each window's region as a background rectangle up
// to top.
func regionShading(p *plot.Plot, ser *Series, top float64) {
	for _, w := range ser.Windows {
		c := regionColours[w.Region]
		if c.A == 0 {
			continue
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: w.StartS, Y: 0}, {X: w.StartS + ser.WindowS, Y: 0},
			{X: w.StartS + ser.WindowS, Y: top}, {X: w.StartS, Y: top}})
		if err != nil {
			continue
		}
		poly.Color, poly.LineStyle.Width = c, 0
		p.Add(poly)
	}
}

// seriesFigures plots latency and throughput over time with regions.
func seriesFigures(ser *Series) ([]Figure, error) {
	var xs, p50, p99, xs99, thr, sent, done []float64
	top := 0.0
	for _, w := range ser.Windows {
		mid := w.StartS + ser.WindowS/2
		if w.TTFTP50Ms != nil {
			xs, p50 = append(xs, mid), append(p50, *w.TTFTP50Ms)
			xs99, p99 = append(xs99, mid), append(p99, *w.TTFTP99Ms)
			top = max(top, *w.TTFTP99Ms)
		}
		thr, sent, done = append(thr, w.OutputTokensPerS), append(sent, w.SendRate), append(done, w.CompletionRate)
	}
	var figs []Figure
	lat := newPlot("TTFT over time", "s", "ms")
	regionShading(lat, ser, top*1.05)
	if len(xs) > 0 {
		l50, l99 := line(xs, p50, colBlue, false), line(xs99, p99, colRed, true)
		lat.Add(l50, l99)
		lat.Legend.Add("p50", l50)
		lat.Legend.Add("p99", l99)
	}
	lat.Y.Min = 0
	svg, err := svgOf(lat, 7*vg.Inch, 3.2*vg.Inch)
	if err != nil {
		return nil, err
	}
	figs = append(figs, Figure{Title: "latency over time", SVG: svg, Caption: regionCaption(ser)})
	mids := make([]float64, len(ser.Windows))
	topT := 0.0
	for i, w := range ser.Windows {
		mids[i] = w.StartS + ser.WindowS/2
		topT = max(topT, w.OutputTokensPerS)
	}
	tp := newPlot("throughput over time", "s", "output tokens/s")
	regionShading(tp, ser, topT*1.05)
	lt := line(mids, thr, colGreen, false)
	tp.Add(lt)
	tp.Legend.Add("output tokens/s", lt)
	tp.Y.Min = 0
	svg, err = svgOf(tp, 7*vg.Inch, 3.2*vg.Inch)
	if err != nil {
		return nil, err
	}
	figs = append(figs, Figure{Title: "throughput over time", SVG: svg, Caption: fmt.Sprintf("Output tokens per second in %g s windows; shading as above.", ser.WindowS)})
	rp := newPlot("requests over time", "s", "requests/s")
	ls, ld := line(mids, sent, colGrey, true), line(mids, done, colOrange, false)
	rp.Add(ls, ld)
	rp.Legend.Add("sent", ls)
	rp.Legend.Add("completed ok", ld)
	rp.Y.Min = 0
	svg, err = svgOf(rp, 7*vg.Inch, 3.2*vg.Inch)
	if err != nil {
		return nil, err
	}
	figs = append(figs, Figure{Title: "offered and completed", SVG: svg, Caption: "Requests sent and completed per second: a gap that persists is a queue."})
	return figs, nil
}

func regionCaption(ser *Series) string {
	var parts []string
	for _, r := range []string{RegionCold, RegionWarm, RegionSaturated, RegionRecovering} {
		for _, w := range ser.Windows {
			if w.Region == r {
				parts = append(parts, r)
				break
			}
		}
	}
	s := fmt.Sprintf("TTFT p50 and p99 of requests sent in each %g s window.", ser.WindowS)
	if len(parts) > 0 {
		s += " Shaded regions: " + strings.Join(parts, ", ") + " (blue cold, yellow warm, orange saturated, pink recovering; unshaded steady)."
	}
	if r := ser.Recovery; r != nil && r.RecoveryS != nil {
		s += fmt.Sprintf(" Recovery after the overload took %g s.", *r.RecoveryS)
	}
	return s
}

// breakdownFigure plots TTFT p50 and p99 per group of a dimension.
func breakdownFigure(dim string, groups []Group) (Figure, error) {
	p := newPlot("TTFT by "+dim, dim, "ms")
	var names []string
	var v50, v99 plotter.Values
	for _, g := range groups {
		d, ok := g.Metrics["ttft_ms"]
		if !ok {
			continue
		}
		var a, b float64
		for _, q := range d.Quantiles {
			switch q.P {
			case 50:
				a = q.Value
			case 99:
				b = q.Value
			}
		}
		names, v50, v99 = append(names, g.Value), append(v50, a), append(v99, b)
	}
	if len(names) == 0 {
		return Figure{}, fmt.Errorf("no TTFT in any %s group", dim)
	}
	w := vg.Points(12)
	b50, err := plotter.NewBarChart(v50, w)
	if err != nil {
		return Figure{}, err
	}
	b99, err := plotter.NewBarChart(v99, w)
	if err != nil {
		return Figure{}, err
	}
	b50.Color, b99.Color = colBlue, colOrange
	b50.LineStyle.Width, b99.LineStyle.Width = 0, 0
	b50.Offset, b99.Offset = -w/2, w/2
	p.Add(b50, b99)
	p.Legend.Add("p50", b50)
	p.Legend.Add("p99", b99)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	svg, err := svgOf(p, 7*vg.Inch, 3.4*vg.Inch)
	return Figure{Title: "breakdown by " + dim, SVG: svg, Caption: "TTFT p50 and p99 per group (order-statistic intervals in the table and --json)."}, err
}

// Figures renders every plot the report has data for.
func Figures(rep *Report) ([]Figure, error) {
	var figs []Figure
	cols := map[string]color.RGBA{"ttft_ms": colBlue, "itl_ms": colGreen, "e2e_ms": colOrange}
	for _, name := range []string{"ttft_ms", "itl_ms", "e2e_ms"} {
		c, ok := rep.Curves[name]
		if !ok || len(c.P) == 0 {
			continue
		}
		f, err := cdfFigure(name, c, cols[name])
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", name, err)
		}
		figs = append(figs, f)
	}
	if h := rep.ITLHistogram; h != nil && len(h.Counts) > 0 {
		f, err := histogramFigure(*h)
		if err != nil {
			return nil, fmt.Errorf("plot ITL histogram: %w", err)
		}
		figs = append(figs, f)
	}
	if rep.Series != nil && len(rep.Series.Windows) > 0 {
		fs, err := seriesFigures(rep.Series)
		if err != nil {
			return nil, fmt.Errorf("plot time series: %w", err)
		}
		figs = append(figs, fs...)
	}
	for _, dim := range slices.Sorted(maps.Keys(rep.Breakdowns)) {
		f, err := breakdownFigure(dim, rep.Breakdowns[dim])
		if err != nil {
			continue // nothing to draw for this dimension
		}
		figs = append(figs, f)
	}
	return figs, nil
}

// EnvelopeFigures plots completed and good throughput against offered
// load, with 95% intervals, the y = x line and the knee.
func EnvelopeFigures(e *Envelope) ([]Figure, error) {
	if len(e.Steps) == 0 {
		return nil, nil
	}
	p := newPlot("service envelope", "offered load (req/s)", "req/s")
	var off, done, good []float64
	top := 0.0
	for _, s := range e.Steps {
		off, done, good = append(off, s.OfferedRate), append(done, s.CompletedRate), append(good, s.GoodputRate)
		top = max(top, s.OfferedRate, s.CompletedRate)
	}
	ideal := line([]float64{0, top}, []float64{0, top}, colGrey, true)
	ld, lg := line(off, done, colBlue, false), line(off, good, colGreen, false)
	p.Add(ideal, ld, lg)
	for _, series := range []struct {
		rate func(Step) float64
		ci   func(Step) [2]float64
		col  color.RGBA
	}{{func(s Step) float64 { return s.CompletedRate }, func(s Step) [2]float64 { return s.CompletedCI }, colBlue},
		{func(s Step) float64 { return s.GoodputRate }, func(s Step) [2]float64 { return s.GoodputCI }, colGreen}} {
		pts := struct {
			plotter.XYs
			plotter.YErrors
		}{}
		for _, s := range e.Steps {
			c, r := series.ci(s), series.rate(s)
			pts.XYs = append(pts.XYs, plotter.XY{X: s.OfferedRate, Y: r})
			pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{r - c[0], c[1] - r})
		}
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return nil, err
		}
		bars.Color = series.col
		p.Add(bars)
	}
	p.Legend.Add("offered (y = x)", ideal)
	p.Legend.Add("completed", ld)
	p.Legend.Add("goodput", lg)
	if e.Knee >= 0 {
		k := e.Steps[e.Knee]
		knee := line([]float64{k.OfferedRate, k.OfferedRate}, []float64{0, top}, colRed, true)
		p.Add(knee)
		p.Legend.Add(fmt.Sprintf("knee (%.1f req/s)", k.OfferedRate), knee)
	}
	p.Legend.Left = true
	p.X.Min, p.Y.Min = 0, 0
	svg, err := svgOf(p, 7*vg.Inch, 4*vg.Inch)
	if err != nil {
		return nil, err
	}
	return []Figure{{Title: "throughput and goodput against offered load", SVG: svg,
		Caption: "Completed and good requests per second at each step, with 95% Poisson intervals; the dashed grey line is what was offered."}}, nil
}
