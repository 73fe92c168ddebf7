package promtext

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// flat is one sample as a sorted, comparable line: name, labels in name
// order (le and quantile as numbers), and the value's bits.
func flat(name string, labels map[string]string, v float64) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(strconv.Quote(name))
	for _, k := range keys {
		val := labels[k]
		if k == "le" || k == "quantile" {
			if f, err := strconv.ParseFloat(val, 64); err == nil {
				val = strconv.FormatFloat(f, 'g', -1, 64)
			}
		}
		fmt.Fprintf(&b, " %q=%q", k, val)
	}
	if math.IsNaN(v) {
		b.WriteString(" NaN")
	} else {
		fmt.Fprintf(&b, " %v", v)
	}
	return b.String()
}

// ours is every sample Scan reads, flattened and sorted.
func ours(text string) (out []string, bad int) {
	bad = Scan(text, func(s Sample) { out = append(out, flat(s.Name, s.Labels(), s.Value)) }, nil)
	slices.Sort(out)
	return out, bad
}

// theirs is every sample expfmt reads, its histograms and summaries
// flattened back into the lines that wrote them; ok is false when expfmt
// refuses the text.
func theirs(text string) (out []string, ok bool) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, false
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			with := func(k, v string) map[string]string {
				c := map[string]string{k: v}
				for a, b := range labels {
					c[a] = b
				}
				return c
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, flat(name, labels, m.GetCounter().GetValue()))
			case dto.MetricType_GAUGE:
				out = append(out, flat(name, labels, m.GetGauge().GetValue()))
			case dto.MetricType_UNTYPED:
				out = append(out, flat(name, labels, m.GetUntyped().GetValue()))
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, bk := range h.GetBucket() {
					out = append(out, flat(name+"_bucket", with("le", strconv.FormatFloat(bk.GetUpperBound(), 'g', -1, 64)), float64(bk.GetCumulativeCount())))
				}
				out = append(out, flat(name+"_count", labels, float64(h.GetSampleCount())), flat(name+"_sum", labels, h.GetSampleSum()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					out = append(out, flat(name, with("quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), q.GetValue()))
				}
				out = append(out, flat(name+"_count", labels, float64(s.GetSampleCount())), flat(name+"_sum", labels, s.GetSampleSum()))
			}
		}
	}
	slices.Sort(out)
	return out, true
}

// TestScanReadsWhatExpfmtReads reads expositions of the engines' shape
// and the format's corners with Scan and with Prometheus's own parser.
func TestScanReadsWhatExpfmtReads(t *testing.T) {
	engines, err := os.ReadFile("testdata/engines.prom")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, text string }{
		{"engines", string(engines)},
		{"escapes", "m{a=\"x\\\"y\\\\z\\nw\",b=\"}{ ,=\"} 1\n"},
		{"blanks", "  m \t{ a = \"1\" , b=\"2\" , } \t 3 \t 1700000000000\n\n\n"},
		{"special values", "a NaN\nb +Inf\nc -Inf\nd 1e-3\ne -0\nf 12345678901234567890\n"},
		{"quoted name in braces", "{\"vllm.requests\",engine=\"0\"} 4\n{\"x y\"} 5\n"},
		{"quoted label name", "m{\"a.b\"=\"c\"} 1\n"},
		{"quoted name before braces", "\"my.metric\"{a=\"b\"} 2\n"},
		{"empty braces", "m{} 1\n"},
		{"timestamp", "m 1 -5\n"},
		{"comments", "# just a comment\n#\n# HELP m with \\\\ escapes \\n here\n# TYPE m gauge\nm 1\n"},
		{"sum and count of untyped", "x_sum 1\nx_count 2\nx_bucket{le=\"1\"} 3\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, ok := theirs(tc.text)
			if !ok {
				t.Fatalf("expfmt refuses the case itself")
			}
			got, bad := ours(tc.text)
			if bad != 0 {
				t.Errorf("%d lines called bad", bad)
			}
			if !slices.Equal(got, want) {
				t.Errorf("samples differ\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestScanSkipsOnlyTheBadLine checks that a malformed line costs only
// itself: the lines around it read, and it is counted.
func TestScanSkipsOnlyTheBadLine(t *testing.T) {
	text := strings.Join([]string{
		"good_one 1",
		"no_value",
		"bad{a=\"unterminated} 2",
		"bad{a=b} 3",
		"bad{a=\"x\\q\"} 4",
		"bad{__name__=\"x\"} 5",
		"{\"two\",\"names\"} 6",
		"bad 1 2 3",
		"bad 0x1p3",
		"bad 1_000",
		"bad 1 notatime",
		"{} 7",
		"9starts_with_digit 8",
		"good_two{a=\"1\"} 2",
		"good_three 3\r",
		"good_four 4", // no newline at the end
	}, "\n")
	var names []string
	var sum float64
	bad := Scan(text, func(s Sample) { names = append(names, s.Name); sum += s.Value }, nil)
	if want := []string{"good_one", "good_two", "good_three", "good_four"}; !slices.Equal(names, want) {
		t.Errorf("read %q, want %q", names, want)
	}
	if sum != 10 {
		t.Errorf("values sum to %v, want 10", sum)
	}
	if bad != 12 {
		t.Errorf("%d lines counted bad, want 12", bad)
	}
}

// TestSampleLabel reads single labels, escapes undone, and a missing one.
func TestSampleLabel(t *testing.T) {
	var got Sample
	Scan(`vllm:cache_config_info{block_size="16",cache_dtype="auto",note="a \"b\" \\ c"} 1`, func(s Sample) { got = s }, nil)
	for name, want := range map[string]string{"block_size": "16", "cache_dtype": "auto", "note": `a "b" \ c`} {
		if v, ok := got.Label(name); !ok || v != want {
			t.Errorf("Label(%q) = %q, %v; want %q", name, v, ok, want)
		}
	}
	if _, ok := got.Label("missing"); ok {
		t.Error("a missing label was found")
	}
}

// typeComment finds a TYPE line as expfmt reads one: blanks may stand
// before and after the '#' ("#TYPE h histogram" is a TYPE line too).
var typeComment = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*TYPE[ \t]`)

// FuzzScan checks that Scan never panics and, wherever expfmt accepts the
// text, reads only samples expfmt reads and counts as bad every line whose
// sample it leaves out. Scan may refuse a line expfmt lets pass: expfmt
// reads a quote inside a bare name as a toggle, so `{A""} 0` is a sample
// of A to it and malformed to the format's grammar and to Scan.
func FuzzScan(f *testing.F) {
	if b, err := os.ReadFile("testdata/engines.prom"); err == nil {
		f.Add(string(b))
	}
	for _, s := range []string{
		"m{a=\"x\\\"y\"} 1\n", "{\"a.b\",c=\"d\"} 2 3\n", "m NaN\n", "m{} +Inf\n",
		"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n",
		"m{a=\"1\",} 1\n", "\"q\"{} 1\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, bad := ours(text)
		want, ok := theirs(text)
		if !ok || typeComment.MatchString(text) {
			return // typed families merge and reorder lines: compared in the table test
		}
		if extra := missingFrom(want, got); len(extra) > 0 {
			t.Errorf("Scan read %q, which expfmt did not, from %q\n got %q\nwant %q", extra, text, got, want)
		}
		if left := len(want) - len(got); left > bad {
			t.Errorf("Scan left out %d of expfmt's samples but counted %d lines bad, in %q\n got %q\nwant %q", left, bad, text, got, want)
		}
	})
}

// missingFrom is each element of sub (sorted) that sorted super lacks,
// counting repeats.
func missingFrom(super, sub []string) (out []string) {
	i := 0
	for _, s := range sub {
		for i < len(super) && super[i] < s {
			i++
		}
		if i < len(super) && super[i] == s {
			i++
			continue
		}
		out = append(out, s)
	}
	return out
}
