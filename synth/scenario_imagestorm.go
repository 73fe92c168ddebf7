package synth

import (
	"fmt"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/trace"
)

// ScenarioImageStorm attaches new images to a share of requests.
const ScenarioImageStorm = "image-storm"

func init() { registerScenario(ScenarioImageStorm, func() ScenarioParams { return &ImageStorm{} }) }

// ImageStorm gives Share (default 0.5) of the window's requests Images new
// images (default 4) of Width × Height pixels (default 1536 × 1536), their
// tokens added to the input: every image an encoder and cache miss.
type ImageStorm struct {
	baseHooks
	Share  float64 `json:"share,omitempty"`
	Images int     `json:"images,omitempty"`
	Width  int32   `json:"width,omitempty"`
	Height int32   `json:"height,omitempty"`
}

func (p *ImageStorm) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.5); err != nil {
		return err
	}
	orDefault(&p.Images, 4)
	orDefault(&p.Width, 1536)
	orDefault(&p.Height, 1536)
	if p.Images < 1 || p.Images > trace.MaxMediaParts || p.Width < 1 || p.Width > trace.MaxImageSidePx || p.Height < 1 || p.Height > trace.MaxImageSidePx {
		return fmt.Errorf("%s: images must be 1 to %d and width and height 1 to %d pixels", s.Name, trace.MaxMediaParts, trace.MaxImageSidePx)
	}
	return nil
}

func (p *ImageStorm) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	if !(g.scenRng.Float64() < p.Share) {
		return
	}
	if limit := g.opts.MaxInputTokens; limit > 0 && int64(p.Images)*int64(media.ImageTokens(int(p.Width), int(p.Height))) >= limit {
		return // the images alone pass the input cap: no prompt could hold them
	}
	r.Features = addLabel(r.Features, trace.FeatureImage)
	r.ImageCount = int32(p.Images)
	r.ImageWidthsPx, r.ImageHeightsPx, r.ImageIDs = nil, nil, nil
	for range p.Images {
		g.storm.fresh++
		r.ImageWidthsPx = append(r.ImageWidthsPx, p.Width)
		r.ImageHeightsPx = append(r.ImageHeightsPx, p.Height)
		r.ImageIDs = append(r.ImageIDs, -g.storm.fresh) // negative: never a fitted or drawn id
		r.InputTokens = min(r.InputTokens+int64(media.ImageTokens(int(p.Width), int(p.Height))), MaxModelTokens)
	}
}
