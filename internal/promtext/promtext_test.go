package promtext

import (
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestExpositionParsesWithPrometheus writes a counter, a gauge and a
// histogram and reads them back with Prometheus's own text parser.
func TestExpositionParsesWithPrometheus(t *testing.T) {
	var b bytes.Buffer
	lbl := Labels("model_name", `a "quoted" name`, "shard", "2")
	WriteHeader(&b, "x:requests_total", "counter", "Requests.")
	WriteSample(&b, "x:requests_total", lbl, 7)
	WriteHeader(&b, "x_in_flight", "gauge", "In flight.")
	WriteSample(&b, "x_in_flight", "", 3)
	h := NewHistogram(0.1, 1, 10)
	for _, v := range []float64{0.05, 0.5, 0.5, 5, 50} {
		h.Observe(v)
	}
	WriteHeader(&b, "x_latency_seconds", "histogram", "Latency.")
	h.Write(&b, "x_latency_seconds", lbl)

	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(&b)
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, b.String())
	}
	if v := fams["x:requests_total"].GetMetric()[0].GetCounter().GetValue(); v != 7 {
		t.Errorf("counter %v, want 7", v)
	}
	if l := fams["x:requests_total"].GetMetric()[0].GetLabel()[0].GetValue(); l != `a "quoted" name` {
		t.Errorf("label %q did not survive quoting", l)
	}
	if v := fams["x_in_flight"].GetMetric()[0].GetGauge().GetValue(); v != 3 {
		t.Errorf("gauge %v, want 3", v)
	}
	hist := fams["x_latency_seconds"].GetMetric()[0].GetHistogram()
	want := []uint64{1, 3, 4, 5} // cumulative: <=0.1, <=1, <=10, +Inf
	for i, bk := range hist.GetBucket() {
		if bk.GetCumulativeCount() != want[i] {
			t.Errorf("bucket le=%v: %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), want[i])
		}
	}
	if hist.GetSampleCount() != 5 || hist.GetSampleSum() != 56.05 {
		t.Errorf("count %d sum %v, want 5 and 56.05", hist.GetSampleCount(), hist.GetSampleSum())
	}
	c := h.Clone()
	c.Observe(1)
	if h.Count() != 5 || c.Count() != 6 {
		t.Error("Clone shares state with the original")
	}
}
