package replay

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/servetrace/servetrace/replay/scrub"
)

// Duration is a time.Duration that JSON holds as a string ("10s"), as the
// rest of run.json does. It reads a number too, as nanoseconds: run.json
// files written before RecordedOptions held durations so.
type Duration time.Duration

// MarshalJSON writes d as its time.Duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string ("1m30s") or nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string such as \"10s\" or nanoseconds", b)
	}
	*d = Duration(n)
	return nil
}

// RecordedOptions is what run.json's "options" records of a replay's
// Options: every setting, in snake case, durations as strings, URLs
// redacted (scrub.URL), and of the secrets only the extra headers' names.
type RecordedOptions struct {
	Target     string            `json:"target"`
	Model      string            `json:"model"`
	ModelMap   map[string]string `json:"model_map,omitempty"`
	API        string            `json:"api"`
	Stream     StreamMode        `json:"stream"`
	Speed      float64           `json:"speed"`
	Rate       float64           `json:"rate"`
	Arrival    Arrival           `json:"arrival"`
	Burstiness float64           `json:"burstiness"`
	Seed       uint64            `json:"seed"`
	PromptSalt uint64            `json:"prompt_salt,omitempty"`
	// OutputSaltFingerprint identifies the salt of the answers'
	// fingerprints (never the salt); OutputSaltRandom: none was given.
	OutputSaltFingerprint string `json:"output_salt_fingerprint,omitempty"`
	OutputSaltRandom      bool   `json:"output_salt_random,omitempty"`
	// Probes is the share of requests a probe went beside; UserProbes
	// how many probes the user gave (0: generated).
	Probes            float64           `json:"probes,omitempty"`
	UserProbes        int               `json:"user_probes,omitempty"`
	Concurrency       int               `json:"concurrency"`
	MaxConcurrency    int               `json:"max_concurrency"`
	From              string            `json:"from"`
	To                string            `json:"to"`
	LeadIn            Duration          `json:"lead_in"`
	Duration          Duration          `json:"duration"`
	MaxRequests       int               `json:"max_requests"`
	WarmupDuration    Duration          `json:"warmup_duration"`
	WarmupRequests    int               `json:"warmup_requests"`
	ConnectTimeout    Duration          `json:"connect_timeout"`
	FirstTokenTimeout Duration          `json:"first_token_timeout"`
	Timeout           Duration          `json:"timeout"`
	Grace             Duration          `json:"grace"`
	MaxLateness       Duration          `json:"max_lateness"`
	Strip             []string          `json:"strip,omitempty"`
	ImageTransport    string            `json:"image_transport"`
	ImageFormat       string            `json:"image_format"`
	GuidedDecoding    bool              `json:"guided_decoding"`
	AdapterMap        map[string]string `json:"adapter_map,omitempty"`
	Adapters          []string          `json:"adapters,omitempty"`
	IgnoreEOS         bool              `json:"ignore_eos"`
	ForceOutputLen    bool              `json:"force_output_len"`
	HTTP              HTTPVersion       `json:"http"`
	CACert            string            `json:"ca_cert"`
	Insecure          bool              `json:"insecure"`
	FollowRedirects   bool              `json:"follow_redirects"`
	Tokenizer         string            `json:"tokenizer"`
	TokenizerPattern  string            `json:"tokenizer_pattern"`
	HeaderNames       []string          `json:"header_names,omitempty"`
	RunID             string            `json:"run_id"`
	Shard             int32             `json:"shard"`
	ShardCount        int32             `json:"shard_count"`
	StartAt           string            `json:"start_at,omitempty"` // RFC 3339
	RotateRows        int               `json:"rotate_rows"`
	RotateEvery       Duration          `json:"rotate_every"`
	WaitReady         Duration          `json:"wait_ready"`
	// MetricsURL is the first engine endpoint's, as runs before roles
	// recorded it; Metrics lists every endpoint with its role.
	MetricsURL      string            `json:"metrics_url"`
	Metrics         []RecordedMetrics `json:"metrics,omitempty"`
	MetricsInterval Duration          `json:"metrics_interval"`
	WaitIdle        Duration          `json:"wait_idle"`
	ServeMetrics    string            `json:"serve_metrics"`
	CollectSpans    string            `json:"collect_spans,omitempty"`
	SpansWait       Duration          `json:"spans_wait,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
}

// Recorded returns what run.json records of o.
func (o *Options) Recorded() RecordedOptions {
	r := RecordedOptions{
		Target: scrub.URL(o.Target), Model: o.Model, ModelMap: o.ModelMap, API: o.API, Stream: o.Stream,
		Speed: o.Speed, Rate: o.Rate, Arrival: o.Arrival, Burstiness: o.Burstiness, Seed: o.Seed, PromptSalt: o.PromptSalt,
		Concurrency: o.Concurrency, MaxConcurrency: o.MaxConcurrency, From: o.From, To: o.To, LeadIn: Duration(o.LeadIn),
		Duration: Duration(o.Duration), MaxRequests: o.MaxRequests, WarmupDuration: Duration(o.WarmupDuration), WarmupRequests: o.WarmupRequests,
		ConnectTimeout: Duration(o.ConnectTimeout), FirstTokenTimeout: Duration(o.FirstTokenTimeout), Timeout: Duration(o.Timeout),
		Grace: Duration(o.Grace), MaxLateness: Duration(o.MaxLateness), Strip: o.Strip, ImageTransport: o.ImageTransport, ImageFormat: o.ImageFormat,
		GuidedDecoding: o.GuidedDecoding, AdapterMap: o.AdapterMap, Adapters: o.Adapters, IgnoreEOS: o.IgnoreEOS, ForceOutputLen: o.ForceOutputLen,
		HTTP: o.HTTP, CACert: o.CACert, Insecure: o.Insecure, FollowRedirects: o.FollowRedirects,
		Tokenizer: o.Tokenizer, TokenizerPattern: o.TokenizerPattern, RunID: o.RunID, Shard: o.Shard, ShardCount: o.ShardCount,
		RotateRows: o.RotateRows, RotateEvery: Duration(o.RotateEvery), WaitReady: Duration(o.WaitReady),
		MetricsInterval: Duration(o.MetricsInterval), WaitIdle: Duration(o.WaitIdle),
		ServeMetrics: o.ServeMetrics, Labels: o.Labels, OutputSaltRandom: o.OutputSalt.Random,
		Probes: o.Probes, UserProbes: len(o.UserProbes),
	}
	if !o.OutputSalt.IsZero() {
		r.OutputSaltFingerprint = o.OutputSalt.Fingerprint()
	}
	if o.CollectSpans != "" {
		r.CollectSpans, r.SpansWait = o.CollectSpans, Duration(o.SpansWait)
	}
	for _, m := range o.Metrics {
		r.Metrics = append(r.Metrics, RecordedMetrics{Role: m.Role, URL: scrub.URL(m.URL)})
	}
	if eps := o.metricsOf(RoleEngine); len(eps) > 0 {
		r.MetricsURL = scrub.URL(eps[0].URL)
	}
	if len(o.Headers) > 0 {
		r.HeaderNames = slices.Sorted(maps.Keys(o.Headers))
	}
	if !o.StartAt.IsZero() {
		r.StartAt = o.StartAt.UTC().Format(time.RFC3339Nano)
	}
	return r
}

// RecordedMetrics is a metrics endpoint as run.json records it.
type RecordedMetrics struct {
	Role MetricsRole `json:"role"`
	URL  string      `json:"url"`
}

// ParseRecordedOptions reads run.json's "options" block (RunInfo.Options,
// as JSON) in either shape: RecordedOptions, or the shape run.json had
// before it (Options' Go field names, durations in nanoseconds).
func ParseRecordedOptions(b []byte) (RecordedOptions, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return RecordedOptions{}, fmt.Errorf("run.json options: %w", err)
	}
	var r RecordedOptions
	if _, old := keys["Target"]; !old {
		if err := json.Unmarshal(b, &r); err != nil {
			return RecordedOptions{}, fmt.Errorf("run.json options: %w", err)
		}
		return r, nil
	}
	// Options has no JSON tags: its field names are the old block's keys,
	// and its durations are nanoseconds (TestReadsOldRunJSONOptions pins
	// a block written before the change).
	var o Options
	if err := json.Unmarshal(b, &o); err != nil {
		return RecordedOptions{}, fmt.Errorf("run.json options (the shape before schema snake case): %w", err)
	}
	var metrics struct{ MetricsURL string }
	if json.Unmarshal(b, &metrics) == nil && metrics.MetricsURL != "" {
		o.Metrics = []MetricsEndpoint{{Role: RoleEngine, URL: metrics.MetricsURL}}
	}
	return o.Recorded(), nil
}
