package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestFitZipfRecoversExponent draws from Zipf laws of known exponents and
// checks the maximum-likelihood fit recovers each.
func TestFitZipfRecoversExponent(t *testing.T) {
	for _, c := range []struct {
		n int
		s float64
	}{{20, 0.6}, {50, 1.2}, {200, 2.0}} {
		z := &Zipf{N: c.n, S: c.s}
		cum := z.cumulative()
		rng := rand.New(rand.NewPCG(1, uint64(c.n)))
		counts := make([]int64, c.n)
		for range 200_000 {
			counts[zipfRank(cum, rng)-1]++
		}
		var seen []int64
		for _, k := range counts {
			if k > 0 {
				seen = append(seen, k)
			}
		}
		got := fitZipf(seen)
		if math.Abs(got.S-c.s) > 0.03 {
			t.Errorf("Zipf(N=%d, s=%.2f): fitted s %.3f", c.n, c.s, got.S)
		}
	}
	if fitZipf([]int64{5}) != nil {
		t.Error("one item has no popularity law")
	}
}

// contractFixture is a trace whose requests carry a known contract: images
// per request 0 (55%), 1 (25%), 2 (12%), 5 (8%), sizes by count class,
// 30% of images repeating an earlier one; tools on a fifth; schemas on a
// tenth, of 40 distinct schemas; adapters of Zipf exponent 1.1 over 30.
func contractFixture(t *testing.T, n int) string {
	rng := rand.New(rand.NewPCG(7, 7))
	adapters := (&Zipf{N: 30, S: 1.1}).cumulative()
	schemas := (&Zipf{N: 40, S: 0.8}).cumulative()
	var images []int64
	var rows []trace.Request
	ts := 0.0
	for i := range n {
		ts += rng.ExpFloat64() * 0.5
		r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint(i), Adapter: fmt.Sprintf("lora-%d", zipfRank(adapters, rng))},
			TS: int64(ts * 1e6), Shape: trace.Shape{InputTokens: int64(100 + rng.IntN(2000)), OutputTokens: int64(10 + rng.IntN(300)), API: trace.APIChat, N: 1}}
		u := rng.Float64()
		count := 0
		switch {
		case u < 0.55:
		case u < 0.80:
			count = 1
		case u < 0.92:
			count = 2
		default:
			count = 5
		}
		for range count {
			w, h := int32(1024), int32(768)
			if count > 1 {
				w, h = 512, 512
			}
			if rng.Float64() < 0.3 {
				w, h = 0, 0 // by URL
			}
			addImage(&r, rng, &images, w, h)
		}
		if count > 0 {
			r.Features = append(r.Features, trace.FeatureImage)
		}
		if rng.Float64() < 0.2 {
			r.ToolCount, r.ToolTokens, r.ToolChoice = 4, 800, "auto"
			r.Features = append(r.Features, trace.FeatureTools)
		}
		if rng.Float64() < 0.1 {
			r.OutputFormat, r.SchemaTokens, r.SchemaID = trace.OutputJSONSchema, int64(60+20*rng.IntN(3)), int64(zipfRank(schemas, rng))
			r.Features = append(r.Features, trace.FeatureSchema)
		}
		if rng.Float64() < 0.15 {
			r.N, r.Seed = 2, new(int64(3))
		}
		slices.Sort(r.Features)
		rows = append(rows, r)
	}
	return writeBucket(t, rows, nil)
}

// TestLongContractFitAndRegenerate fits the contract fixture, checks the
// fitted laws against the fixture's, and validates a regenerated workload
// on every contract check.
func TestLongContractFitAndRegenerate(t *testing.T) {
	skipLong(t)
	real := contractFixture(t, 8000)
	m, err := Fit(context.Background(), real, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	ct := m.Contract
	if ct == nil {
		t.Fatal("no contract fitted from a trace with images, tools and schemas")
	}
	if math.Abs(ct.Adapters.S-1.1) > 0.1 || ct.Adapters.N != 30 {
		t.Errorf("adapters %+v, want Zipf s 1.1 over 30", ct.Adapters)
	}
	if math.Abs(ct.ImageReuse-0.3) > 0.03 {
		t.Errorf("image reuse %.3f, want about 0.3", ct.ImageReuse)
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("the fitted model does not validate: %v", err)
	}
	gen := generateBucket(t, m, GenerateOptions{Seed: 5})
	v, err := Validate(context.Background(), real, gen, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ks_images_per_request", "ks_image_pixels", "image_reuse", "ks_tool_tokens", "ks_schema_tokens", "adapter_zipf_s", "sampling_extras_share"}
	for _, name := range want {
		i := slices.IndexFunc(v.Checks, func(c Check) bool { return c.Name == name })
		if i < 0 {
			t.Errorf("validate has no %s check", name)
			continue
		}
		c := v.Checks[i]
		t.Logf("%s: real %.3f synth %.3f diff %.4f", name, c.Real, c.Synth, c.Diff)
		if !c.Pass {
			t.Errorf("%s: diff %.4f above %.2f", name, c.Diff, c.Threshold)
		}
	}
	rows := readRows(t, gen)
	for _, r := range rows {
		if err := r.Validate(); err != nil {
			t.Fatalf("generated row: %v", err)
		}
		if (r.ImageCount > 0) != slices.Contains(r.Features, trace.FeatureImage) {
			t.Fatalf("a generated row's images (%d) disagree with its features %v", r.ImageCount, r.Features)
		}
	}
}

// addImage adds one w×h image to r: a new id, or 30% of the time (once
// there are some) one of images again, a reused image.
func addImage(r *trace.Request, rng *rand.Rand, images *[]int64, w, h int32) {
	id := int64(rng.Uint64() >> 1)
	if len(*images) > 0 && rng.Float64() < 0.3 {
		id = (*images)[rng.IntN(len(*images))]
	} else {
		*images = append(*images, id)
	}
	r.ImageCount++
	r.ImageWidthsPx, r.ImageHeightsPx, r.ImageIDs = append(r.ImageWidthsPx, w), append(r.ImageHeightsPx, h), append(r.ImageIDs, id)
}
