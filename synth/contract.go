package synth

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// ContractModel is what requests ask besides their lengths (the workload
// contract), conditioned on the feature set the mix draws: how many images
// of what sizes an image request carries, how often an image repeats, how
// many tools of how many tokens, the schema sizes and how many distinct
// schemas, the adapters' popularity and the sampling extras. Each
// categorical keeps at most maxCategories values, as the mix does.
type ContractModel struct {
	// ImageCount is over requests carrying images ("1", "2", ...);
	// ImageSize over their images, by image-count class (imageClass:
	// "1", "2-3", "4+"), as "WxH" ("0x0": unknown), since a request with
	// many images tends to carry smaller ones.
	ImageCount Categorical            `json:"image_count"`
	ImageSize  map[string]Categorical `json:"image_size,omitempty"`
	// ImageReuse is the share of images whose id an earlier request had
	// sent: what a multimodal cache can hit.
	ImageReuse float64 `json:"image_reuse"`
	// AudioCount and AudioMs (rounded to 100 ms) are over requests with
	// audio and their clips.
	AudioCount Categorical `json:"audio_count"`
	AudioMs    Categorical `json:"audio_ms"`
	// Tools is over requests with tools: "COUNT/TOKENS/CHOICE" (tokens
	// rounded to 2 significant digits), since an application sends the
	// same tool list each time.
	Tools Categorical `json:"tools"`
	// Schema is over requests with constrained decoding: "FORMAT/TOKENS";
	// Schemas is the popularity of distinct schemas (a grammar cache's
	// hit rate follows it).
	Schema  Categorical `json:"schema"`
	Schemas *Zipf       `json:"schemas,omitempty"`
	// Adapters is the popularity of distinct LoRA adapters.
	Adapters *Zipf `json:"adapters,omitempty"`
	// Sampling is over all requests: the extras a request set, as a key
	// ("n=2;seed;top_k=40;top_logprobs=3;stop=2;effort=high;penalties"),
	// "" for none.
	Sampling Categorical `json:"sampling"`
}

// Zipf is a popularity law over N items: item k (1 = the most requested)
// has probability k^−S / H(N, S). S is fitted by maximum likelihood.
type Zipf struct {
	N int     `json:"n"`
	S float64 `json:"s"`
}

// fitZipf fits S to item counts by maximum likelihood: the S at which the
// law's mean log rank equals the sample's (the likelihood's stationary
// point; the mean log rank falls as S grows, so bisection finds it). Nil
// for fewer than two items.
func fitZipf(counts []int64) *Zipf {
	if len(counts) < 2 {
		return nil
	}
	c := slices.Clone(counts)
	slices.SortFunc(c, func(a, b int64) int { return int(b - a) })
	var n, sumLog float64
	for k, x := range c {
		n += float64(x)
		sumLog += float64(x) * math.Log(float64(k+1))
	}
	target := sumLog / n
	meanLog := func(s float64) float64 {
		var z, m float64
		for k := 1; k <= len(c); k++ {
			w := math.Pow(float64(k), -s)
			z += w
			m += w * math.Log(float64(k))
		}
		return m / z
	}
	lo, hi := 0.0, 20.0
	for range 100 {
		mid := (lo + hi) / 2
		if meanLog(mid) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return &Zipf{N: len(c), S: (lo + hi) / 2}
}

// MaxZipfN bounds a popularity law's items (the fit keeps at most this
// many distinct ids).
const MaxZipfN = 1 << 20

// cumulative is the law's cumulative weights, for zipfRank.
func (z *Zipf) cumulative() []float64 {
	cum := make([]float64, z.N)
	total := 0.0
	for k := 1; k <= z.N; k++ {
		total += math.Pow(float64(k), -z.S)
		cum[k-1] = total
	}
	return cum
}

// zipfRank draws a 1-based rank from a law's cumulative weights.
func zipfRank(cum []float64, rng *rand.Rand) int {
	u := rng.Float64() * cum[len(cum)-1]
	k, _ := slices.BinarySearch(cum, u)
	return min(k, len(cum)-1) + 1
}

// imageClass buckets an image count for ImageSize.
func imageClass(n int32) string {
	switch {
	case n <= 1:
		return "1"
	case n <= 3:
		return "2-3"
	}
	return "4+"
}

// twoDigits rounds a token count to two significant digits, so sizes that
// differ by a few tokens share a category.
func twoDigits(n int64) int64 {
	if n < 100 {
		return n
	}
	p := int64(math.Pow(10, math.Floor(math.Log10(float64(n)))-1))
	return (n + p/2) / p * p
}

// samplingKey is the key of a request's sampling extras.
func samplingKey(r *trace.Request) string {
	var parts []string
	if r.N > 1 {
		parts = append(parts, "n="+strconv.Itoa(int(r.N)))
	}
	if r.Seed != nil {
		parts = append(parts, "seed")
	}
	if r.TopK != nil {
		parts = append(parts, "top_k="+strconv.Itoa(int(*r.TopK)))
	}
	if r.TopLogprobs != nil {
		parts = append(parts, "top_logprobs="+strconv.Itoa(int(*r.TopLogprobs)))
	}
	if r.StopCount > 0 {
		parts = append(parts, "stop="+strconv.Itoa(int(r.StopCount)))
	}
	if r.ReasoningEffort != "" {
		parts = append(parts, "effort="+r.ReasoningEffort)
	}
	if r.PresencePenalty != nil || r.FrequencyPenalty != nil {
		parts = append(parts, "penalties")
	}
	return strings.Join(parts, ";")
}

// reuseCounter counts ids and how many of them an earlier one repeated,
// remembering at most maxSeenImages distinct ids.
type reuseCounter struct {
	seen          map[int64]bool
	total, reused int64
}

func (c *reuseCounter) add(id int64) {
	c.total++
	c.sight(id)
}

// sight counts a first sight of id (in a slice): a repeat if id was seen.
func (c *reuseCounter) sight(id int64) {
	if c.seen == nil {
		c.seen = map[int64]bool{}
	}
	if c.seen[id] {
		c.reused++
	} else if len(c.seen) < maxSeenImages {
		c.seen[id] = true
	}
}

// merge adds the ids o counted over the slice after c's: o's first sight
// of an id c had seen is a repeat, so below maxSeenImages distinct ids the
// merge counts exactly what one counter over both slices would.
func (c *reuseCounter) merge(o *reuseCounter) {
	c.total += o.total
	c.reused += o.reused
	for _, id := range slices.Sorted(maps.Keys(o.seen)) {
		c.sight(id)
	}
}

// share is the repeated ids' share, 0 without any.
func (c *reuseCounter) share() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.reused) / float64(c.total)
}

// popularity counts uses per distinct key, keeping at most MaxZipfN keys.
type popularity map[string]int64

func (p popularity) add(key string) { p.addN(key, 1) }

// addN counts n uses of key, unless MaxZipfN other keys are kept.
func (p popularity) addN(key string, n int64) {
	if _, known := p[key]; known || len(p) < MaxZipfN {
		p[key] += n
	}
}

// merge adds o's counts to p's, keys in order where MaxZipfN cuts.
func (p popularity) merge(o popularity) {
	for _, k := range slices.Sorted(maps.Keys(o)) {
		p.addN(k, o[k])
	}
}

// zipf fits the popularity law of the counts, nil for fewer than two keys.
func (p popularity) zipf() *Zipf {
	counts := make([]int64, 0, len(p))
	for _, n := range p {
		counts = append(counts, n)
	}
	return fitZipf(counts)
}

// contractFitter counts the contract's quantities over first turns.
type contractFitter struct {
	imageCount, audioCount, audioMs, tools, schema, sampling *catCounter
	imageSize                                                map[string]*catCounter
	images                                                   reuseCounter
	schemas, adapters                                        popularity
	any                                                      bool
}

func newContractFitter() *contractFitter {
	return &contractFitter{imageCount: newCatCounter(), audioCount: newCatCounter(), audioMs: newCatCounter(), tools: newCatCounter(),
		schema: newCatCounter(), sampling: newCatCounter(), imageSize: map[string]*catCounter{},
		schemas: popularity{}, adapters: popularity{}}
}

// maxSeenImages bounds the image ids kept to measure reuse.
const maxSeenImages = 1 << 20

func (f *contractFitter) add(r *trace.Request) {
	if r.ImageCount > 0 {
		f.any = true
		f.imageCount.add(strconv.Itoa(int(r.ImageCount)), 0, 0)
		cls := imageClass(r.ImageCount)
		if f.imageSize[cls] == nil {
			f.imageSize[cls] = newCatCounter()
		}
		for i := range int(r.ImageCount) {
			var w, h int32
			if i < len(r.ImageWidthsPx) && i < len(r.ImageHeightsPx) {
				w, h = r.ImageWidthsPx[i], r.ImageHeightsPx[i]
			}
			f.imageSize[cls].add(fmt.Sprintf("%dx%d", w, h), 0, 0)
		}
		for _, id := range r.ImageIDs {
			f.images.add(id)
		}
	}
	if r.AudioCount > 0 {
		f.any = true
		f.audioCount.add(strconv.Itoa(int(r.AudioCount)), 0, 0)
		for _, ms := range r.AudioMs {
			f.audioMs.add(strconv.FormatInt((ms+50)/100*100, 10), 0, 0)
		}
	}
	if r.ToolCount > 0 {
		f.any = true
		f.tools.add(fmt.Sprintf("%d/%d/%s", r.ToolCount, twoDigits(r.ToolTokens), r.ToolChoice), 0, 0)
	}
	if r.OutputFormat != "" {
		f.any = true
		f.schema.add(fmt.Sprintf("%s/%d", r.OutputFormat, twoDigits(r.SchemaTokens)), 0, 0)
		if r.SchemaID != 0 {
			f.schemas.add(strconv.FormatInt(r.SchemaID, 10))
		}
	}
	if r.Adapter != "" {
		f.adapters.add(r.Adapter)
	}
	key := samplingKey(r)
	if key != "" {
		f.any = true
	}
	f.sampling.add(key, 0, 0)
}

// merge adds the counts of o, fitted over the slice after f's, to f's.
func (f *contractFitter) merge(o *contractFitter) {
	f.imageCount.merge(o.imageCount)
	f.audioCount.merge(o.audioCount)
	f.audioMs.merge(o.audioMs)
	f.tools.merge(o.tools)
	f.schema.merge(o.schema)
	f.sampling.merge(o.sampling)
	for cls, c := range o.imageSize {
		if f.imageSize[cls] == nil {
			f.imageSize[cls] = newCatCounter()
		}
		f.imageSize[cls].merge(c)
	}
	f.images.merge(&o.images)
	f.schemas.merge(o.schemas)
	f.adapters.merge(o.adapters)
	f.any = f.any || o.any
}

// fit returns the contract, nil when no request carried any of it (the
// generator then draws nothing, as before the contract was fitted).
func (f *contractFitter) fit() *ContractModel {
	if !f.any && len(f.adapters) < 2 {
		return nil
	}
	m := &ContractModel{ImageCount: f.imageCount.categorical(), AudioCount: f.audioCount.categorical(), AudioMs: f.audioMs.categorical(),
		Tools: f.tools.categorical(), Schema: f.schema.categorical(), Sampling: f.sampling.categorical()}
	if len(f.imageSize) > 0 {
		m.ImageSize = map[string]Categorical{}
		for k, c := range f.imageSize {
			m.ImageSize[k] = c.categorical()
		}
	}
	m.ImageReuse = f.images.share()
	m.Schemas, m.Adapters = f.schemas.zipf(), f.adapters.zipf()
	return m
}

// contractDrawer draws a request's contract from the model, on its own
// random stream so that a model without one generates as before.
type contractDrawer struct {
	m   *ContractModel
	rng *rand.Rand
	// schemaCum is the schema popularity's cumulative weights.
	schemaCum []float64
	// recent holds recent image ids, the pool a reused image is drawn from.
	recent []int64
	next   int
}

func newContractDrawer(m *ContractModel, rng *rand.Rand) *contractDrawer {
	d := &contractDrawer{m: m, rng: rng}
	if m.Schemas != nil && m.Schemas.N > 0 {
		d.schemaCum = m.Schemas.cumulative()
	}
	return d
}

// maxRecentImages bounds the pool of images a reuse draws from.
const maxRecentImages = 4096

// draw fills r's contract quantities for its feature set.
func (d *contractDrawer) draw(r *trace.Request) {
	m, rng := d.m, d.rng
	has := func(f string) bool { return slices.Contains(r.Features, f) }
	if has(trace.FeatureImage) {
		n, _ := strconv.Atoi(m.ImageCount.pick(rng, -1))
		n = max(n, 1)
		r.ImageCount = int32(n)
		sizes := m.ImageSize[imageClass(int32(n))]
		for range n {
			var w, h int32
			fmt.Sscanf(sizes.pick(rng, -1), "%dx%d", &w, &h)
			r.ImageWidthsPx = append(r.ImageWidthsPx, w)
			r.ImageHeightsPx = append(r.ImageHeightsPx, h)
			r.ImageIDs = append(r.ImageIDs, d.imageID())
		}
	}
	if has(trace.FeatureAudio) {
		n, _ := strconv.Atoi(m.AudioCount.pick(rng, -1))
		n = max(n, 1)
		r.AudioCount = int32(n)
		for range n {
			ms, _ := strconv.ParseInt(m.AudioMs.pick(rng, -1), 10, 64)
			r.AudioMs = append(r.AudioMs, ms)
			r.AudioIDs = append(r.AudioIDs, int64(rng.Uint64()>>1))
		}
	}
	if has(trace.FeatureTools) {
		var count int32
		var tokens int64
		var choice string
		if parts := strings.SplitN(m.Tools.pick(rng, -1), "/", 3); len(parts) == 3 {
			fmt.Sscan(parts[0], &count)
			fmt.Sscan(parts[1], &tokens)
			choice = parts[2]
		}
		r.ToolCount, r.ToolTokens, r.ToolChoice = max(count, 1), tokens, choice
	}
	d.drawSchema(r, has)
	if has(trace.FeatureLogprobs) {
		r.Logprobs = true
	}
	applySamplingKey(r, m.Sampling.pick(rng, -1))
}

// drawSchema draws the constrained decoding of a request labelled
// json_schema, json or grammar: a size of that format, and a schema id by
// the fitted popularity of distinct schemas.
func (d *contractDrawer) drawSchema(r *trace.Request, has func(string) bool) {
	format := ""
	switch {
	case has(trace.FeatureSchema):
		format = trace.OutputJSONSchema
	case has(trace.FeatureJSON):
		r.OutputFormat = trace.OutputJSONObject
		return
	case has(trace.FeatureGrammar):
		format = trace.OutputRegex
	default:
		return
	}
	r.OutputFormat = format
	for range 8 { // a size of the matching format, where the fit has one
		f, tokens, ok := strings.Cut(d.m.Schema.pick(d.rng, -1), "/")
		if ok && (f == format || format == trace.OutputRegex && f != trace.OutputJSONSchema && f != trace.OutputJSONObject) {
			r.OutputFormat = f
			fmt.Sscan(tokens, &r.SchemaTokens)
			break
		}
	}
	id := 1
	if d.schemaCum != nil {
		id = zipfRank(d.schemaCum, d.rng)
	}
	r.SchemaID = int64(id)
}

// imageID draws an image id: an earlier one with the fitted reuse share,
// else a new one.
func (d *contractDrawer) imageID() int64 {
	if len(d.recent) > 0 && d.rng.Float64() < d.m.ImageReuse {
		return d.recent[d.rng.IntN(len(d.recent))]
	}
	id := int64(d.rng.Uint64() >> 1)
	if len(d.recent) < maxRecentImages {
		d.recent = append(d.recent, id)
	} else {
		d.recent[d.next] = id
		d.next = (d.next + 1) % maxRecentImages
	}
	return id
}

// samplingKeys are the names a samplingKey may hold.
var samplingKeys = []string{"n", "seed", "top_k", "top_logprobs", "stop", "effort", "penalties"}

// applySamplingKey sets the sampling extras a samplingKey names.
func applySamplingKey(r *trace.Request, key string) {
	if key == "" {
		return
	}
	for _, p := range strings.Split(key, ";") {
		name, val, _ := strings.Cut(p, "=")
		n, _ := strconv.ParseInt(val, 10, 64)
		switch name {
		case "n":
			r.N = int32(max(1, min(n, trace.MaxN)))
		case "seed":
			r.Seed = new(int64(1))
		case "top_k":
			r.TopK = new(int32(n))
		case "top_logprobs":
			r.TopLogprobs = new(int32(n))
			r.Logprobs = true
		case "stop":
			r.StopCount = int32(min(n, trace.MaxStops))
		case "effort":
			r.ReasoningEffort = val
		case "penalties":
			r.PresencePenalty = new(0.0)
		}
	}
}

// copyContract gives a session's later turn its first turn's contract:
// the same application, tools, schema and adapter, with the same images in
// its history.
func copyContract(r, prev *trace.Request) {
	r.Media, r.Calls = prev.Media, prev.Calls
	r.N, r.Seed, r.TopK, r.TopLogprobs = prev.N, prev.Seed, prev.TopK, prev.TopLogprobs
	r.PresencePenalty, r.FrequencyPenalty = prev.PresencePenalty, prev.FrequencyPenalty
}

// stormState is what the contract scenarios (adapter-churn, image-storm,
// schema-storm) keep between requests: the churn law's weights and the
// counter that makes images and schemas new. It lives in the generator,
// not in their parameters, so one scenario value may serve two runs.
type stormState struct {
	churnCum []float64
	fresh    int64
}

// addLabel returns labels with l added, sorted, without touching the
// slice it was given (later turns share their first turn's).
func addLabel(labels []string, l string) []string {
	if slices.Contains(labels, l) {
		return labels
	}
	out := append(slices.Clone(labels), l)
	slices.Sort(out)
	return out
}
