package synth

import (
	"fmt"
	"slices"

	"github.com/servetrace/servetrace/trace"
)

// contractSample is what validation reads of one side's workload contract.
type contractSample struct {
	imagesPerRequest []float64 // every request's image count, 0 included
	pixels           []float64 // each image of known size: width × height
	images           reuseCounter
	audioMs          []float64
	toolTokens       []float64 // requests with tools
	schemaTokens     []float64 // requests with a sized schema
	adapters         popularity
	extras           int64 // requests with any sampling extra
	requests         int64
}

func (s *contractSample) add(r *trace.Request) {
	if s.adapters == nil {
		s.adapters = popularity{}
	}
	s.requests++
	s.imagesPerRequest = append(s.imagesPerRequest, float64(r.ImageCount))
	for i := range min(len(r.ImageWidthsPx), len(r.ImageHeightsPx)) {
		if w, h := r.ImageWidthsPx[i], r.ImageHeightsPx[i]; w > 0 && h > 0 {
			s.pixels = append(s.pixels, float64(w)*float64(h))
		}
	}
	for _, id := range r.ImageIDs {
		s.images.add(id)
	}
	for _, ms := range r.AudioMs {
		if ms > 0 {
			s.audioMs = append(s.audioMs, float64(ms))
		}
	}
	if r.ToolCount > 0 {
		s.toolTokens = append(s.toolTokens, float64(r.ToolTokens))
	}
	if r.SchemaTokens > 0 {
		s.schemaTokens = append(s.schemaTokens, float64(r.SchemaTokens))
	}
	if r.Adapter != "" {
		s.adapters.add(r.Adapter)
	}
	if samplingKey(r) != "" {
		s.extras++
	}
}

// addContract files the contract's checks, each where the real side
// carries that part of the contract: images per request, image sizes and
// reuse, clip durations, tool and schema sizes, the adapters' Zipf
// exponent and the share of requests with sampling extras.
func (v *Validation) addContract(real, syn *contractSample, add func(string, float64, float64, bool), addKS func(string, []float64, []float64)) {
	if slices.ContainsFunc(real.imagesPerRequest, func(n float64) bool { return n > 0 }) {
		addKS("ks_images_per_request", real.imagesPerRequest, syn.imagesPerRequest)
	}
	if len(real.pixels) > 0 && len(syn.pixels) > 0 {
		addKS("ks_image_pixels", real.pixels, syn.pixels)
	}
	if real.images.total > 0 && syn.images.total > 0 {
		add("image_reuse", real.images.share(), syn.images.share(), false)
	}
	for _, k := range []struct {
		name      string
		real, syn []float64
	}{{"ks_audio_ms", real.audioMs, syn.audioMs}, {"ks_tool_tokens", real.toolTokens, syn.toolTokens}, {"ks_schema_tokens", real.schemaTokens, syn.schemaTokens}} {
		switch {
		case len(k.real) == 0:
		case len(k.syn) == 0:
			v.SkippedReason = append(v.SkippedReason, fmt.Sprintf("%s: the synthetic side has none", k.name))
		default:
			addKS(k.name, k.real, k.syn)
		}
	}
	if rz, sz := real.adapters.zipf(), syn.adapters.zipf(); rz != nil && sz != nil {
		add("adapter_zipf_s", rz.S, sz.S, true)
	}
	if real.extras > 0 {
		add("sampling_extras_share", float64(real.extras)/float64(real.requests), float64(syn.extras)/float64(max(syn.requests, 1)), false)
	}
}
