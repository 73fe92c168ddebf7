package replay

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/replay/scrub"
	"github.com/servetrace/servetrace/spans"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// Arrival is the arrival process of Options.Rate.
type Arrival string

// Arrival processes.
const (
	ArrivalPoisson  Arrival = "poisson"
	ArrivalGamma    Arrival = "gamma"
	ArrivalConstant Arrival = "constant"
)

// StreamMode is Options.Stream: whether requests stream.
type StreamMode string

// Stream modes: auto (or "") uses each request's stream flag.
const (
	StreamAuto StreamMode = "auto"
	StreamOn   StreamMode = "true"
	StreamOff  StreamMode = "false"
)

// Image transports for Options.ImageTransport.
const (
	ImageTransportData = "data"
	ImageTransportURL  = "url"
)

// HTTPVersion is Options.HTTP: the one protocol the client speaks.
type HTTPVersion string

// HTTP versions; "" is HTTP1.
const (
	HTTP1 HTTPVersion = "1.1"
	HTTP2 HTTPVersion = "2" // h2 by ALPN over TLS, by prior knowledge over http://
)

// Options configures a replay, in groups that each check their own fields
// (validate): where to connect, what the requests carry, when they are
// sent, how long anything may take, what to watch on the server, and what
// the run writes. The zero value of a field means "not set";
// DefaultOptions fills the ones that need a value.
type Options struct {
	Endpoint
	Requests
	Schedule
	Limits
	Watch
	Output
}

// Endpoint is where the replay connects and how.
type Endpoint struct {
	// Target is the endpoint's base URL, e.g. http://127.0.0.1:8000.
	Target string
	// APIKey is sent as a bearer token; it is never written anywhere.
	APIKey string `json:"-"`
	// Headers are extra request headers; their values are never written.
	Headers map[string]string `json:"-"`
	// HTTP is "1.1" (default) or "2"; CACert trusts a PEM certificate for
	// https endpoints; Insecure skips certificate verification.
	HTTP     HTTPVersion
	CACert   string
	Insecure bool
	// FollowRedirects follows a redirect within the target's origin
	// (scheme, host and port), without the Authorization header and
	// Headers. Unset, or to another origin, a redirect is not followed: the
	// request is recorded http_error.
	FollowRedirects bool
}

// Requests is what each request carries, and how the workload's rows
// become requests.
type Requests struct {
	// Model overrides every request's model; when both are empty the
	// endpoint's first listed model is used. ModelMap renames the rows'
	// models (a=b) and applies before Model's fallback.
	Model    string
	ModelMap map[string]string
	// API forces "chat" or "completions"; empty uses each request's api.
	API string
	// Stream forces streaming on ("true") or off ("false"); "" or "auto"
	// uses each request's stream flag.
	Stream StreamMode
	// PromptSalt, when not 0, is mixed into the text of every prompt
	// (tokenize.PromptBuilder.Salted): the run's prompts are then new to
	// a server's prefix cache that an earlier run of the same workload
	// warmed, while prompts sharing prefix blocks still share them within
	// the run. A sweep salts each step.
	PromptSalt uint64
	// Strip names features (Features) never to send, on purpose: each
	// request that carried one records it as stripped.
	Strip []string
	// ImageTransport sends images as base64 data URIs ("data", the
	// default) or as URLs of a loopback image server the replay starts
	// ("url"; the target must reach 127.0.0.1, so it runs on this host).
	// ImageFormat is "png" (default) or "jpeg".
	ImageTransport string
	ImageFormat    string
	// GuidedDecoding sends JSON schemas, regexes, grammars and choice
	// lists as vLLM's older guided_json, guided_regex, guided_grammar and
	// guided_choice (removed in vLLM 0.12) instead of response_format and
	// structured_outputs.
	GuidedDecoding bool
	// AdapterMap renames the workload's LoRA adapters (a=b) to the names
	// the server serves them under; Adapters, instead, assigns the
	// server's adapters to the workload's by popularity rank.
	AdapterMap map[string]string
	Adapters   []string
	// IgnoreEOS asks the server to ignore end-of-sequence (vLLM, SGLang and
	// the simulator honour it; OpenAI's API rejects it). ForceOutputLen also
	// sends min_tokens = max_tokens, so the output has exactly that length
	// where the server supports both.
	IgnoreEOS      bool
	ForceOutputLen bool
	// Tokenizer synthesizes prompts of exact token counts: a bundled
	// encoding (cl100k_base, o200k_base, p50k_base), a tiktoken-format rank
	// file path (Llama 3 style, with TokenizerPattern, default Llama 3's), or
	// "server" to count with the endpoint's /tokenize route.
	Tokenizer        string
	TokenizerPattern string
	// Probes is the share of the workload's requests beside which a probe
	// request is sent at the same time: a request whose answer is graded
	// exactly (replay/probe), so the run says whether answers stayed
	// right under its load. UserProbes, when given, are the probes sent;
	// otherwise each is generated from a seed. Probes add load.
	Probes     float64
	UserProbes []probe.Probe `json:"-"`
}

// Schedule is when requests are sent: the workload's own timing, scaled or
// replaced, cut to a window, and split among shards.
type Schedule struct {
	// Speed scales the workload's timing: 2 sends twice as fast.
	Speed float64
	// Rate, when positive, replaces the workload's timing with an arrival
	// process of that many requests per second: Arrival "poisson"
	// (default), "gamma" with shape Burstiness (1 = Poisson, below 1
	// burstier), or "constant". Seed makes it reproducible.
	Rate       float64
	Arrival    Arrival
	Burstiness float64
	Seed       uint64
	// Concurrency, when positive, runs closed loop: that many requests in
	// flight, a new one as soon as one finishes; the workload's timing is
	// ignored.
	Concurrency int
	// MaxConcurrency caps requests in flight in open loop: a request that
	// finds the cap full waits, and admitted_ns records when it left.
	MaxConcurrency int
	// From and To cut a window out of the workload: each an RFC 3339 time
	// or an offset from the workload's first request ("10m"). LeadIn
	// prepends that much of the workload before From, marked warmup.
	From, To string
	LeadIn   time.Duration
	// Duration and MaxRequests cut the schedule (0 = no limit).
	Duration    time.Duration
	MaxRequests int
	// WarmupDuration and WarmupRequests mark the first part of the schedule
	// as warmup: recorded, but excluded by analyze.
	WarmupDuration time.Duration
	WarmupRequests int
	// Shard and ShardCount split the workload: this process sends the
	// requests (whole sessions) whose key hashes to Shard modulo
	// ShardCount, at their times in the full schedule. ShardCount 0 or 1:
	// no split.
	Shard      int32
	ShardCount int32
	// StartAt, when set, is the wall-clock time of the schedule's zero, so
	// that shards started apart send on one timeline.
	StartAt time.Time
}

// Limits bound how long a request, and the run's end, may take, and how
// late the client may send before the run is called client-saturated.
type Limits struct {
	// ConnectTimeout bounds dialing; FirstTokenTimeout bounds send to the
	// first token event; Timeout bounds send to the end of the response.
	ConnectTimeout    time.Duration
	FirstTokenTimeout time.Duration
	Timeout           time.Duration
	// Grace is how long in-flight requests may finish after the run is
	// interrupted before they are aborted.
	Grace time.Duration
	// MaxLateness marks the run client-saturated when lateness p99 exceeds
	// it beyond sampling doubt (see saturatedBy).
	MaxLateness time.Duration
}

// Watch is what the replay watches on the server, before and during the
// run, and what it serves of its own.
type Watch struct {
	// WaitReady polls the endpoint for up to this long before starting
	// (0 = check once). Metrics are Prometheus endpoints scraped before,
	// every MetricsInterval during, and after the run, each in its role;
	// WaitIdle (needs an engine endpoint) waits up to this long for the
	// server to report no running or waiting requests before starting.
	WaitReady       time.Duration
	Metrics         []MetricsEndpoint
	MetricsInterval time.Duration
	WaitIdle        time.Duration
	// ServeMetrics, when set, serves the replayer's own Prometheus metrics
	// at http://ADDR/metrics during the run.
	ServeMetrics string
	// CollectSpans, when set, receives the server's request spans over
	// OTLP (gRPC and HTTP) at this host:port (no host: 127.0.0.1) during
	// the run, keeps the run's, and writes their phases to the run dir;
	// SpansWait (default 10s) is how long the run's end waits for the
	// last batch. A host other than loopback is refused unless
	// AllowRemoteSpans is set: the receiver takes spans from any host
	// that reaches it.
	CollectSpans     string
	SpansWait        time.Duration
	AllowRemoteSpans bool
}

// Output is what names the run and how it is written and reported.
type Output struct {
	// RunID names the run (default: generated); shards of one run share it.
	RunID string
	// RotateRows and RotateEvery close a results part after that many rows
	// or that much time, whichever comes first.
	RotateRows  int
	RotateEvery time.Duration
	// Labels are free key=value pairs recorded in run.json.
	Labels map[string]string
	// CommandLine is recorded in run.json; redact it first (RedactArgs).
	CommandLine []string `json:"-"`
	// Progress, when set, receives a status line about once a second.
	Progress io.Writer `json:"-"`
	// OutputSalt keys each answer's fingerprint (trace.Result's
	// OutputHashes); only its fingerprint reaches run.json. Runs compare
	// answer for answer only under one salt; unset, a random one.
	OutputSalt anon.Salt `json:"-"`
}

// DefaultOptions returns options a newcomer can live with.
func DefaultOptions() Options {
	return Options{
		Requests: Requests{Tokenizer: tokenize.DefaultEncoding},
		Schedule: Schedule{Speed: 1, Arrival: ArrivalPoisson, Burstiness: 1},
		Limits:   Limits{ConnectTimeout: 10 * time.Second, Timeout: 10 * time.Minute, Grace: 10 * time.Second, MaxLateness: 5 * time.Millisecond},
		Watch:    Watch{MetricsInterval: 5 * time.Second, SpansWait: 10 * time.Second},
		Output:   Output{RotateRows: 10_000, RotateEvery: 10 * time.Second},
	}
}

// validate checks options group by group and fills unset ones from
// DefaultOptions. An error is an *opterr.Error naming the Options field at
// fault (its reason names other fields by their Go names); the caller
// names them its way.
func (o *Options) validate() error {
	def := DefaultOptions()
	if err := o.Schedule.validate(def.Schedule); err != nil {
		return err
	}
	if err := o.Limits.validate(def.Limits); err != nil {
		return err
	}
	if err := o.Output.validate(def.Output); err != nil {
		return err
	}
	if err := o.Watch.validate(def.Watch); err != nil {
		return err
	}
	if err := o.Requests.validate(def.Requests); err != nil {
		return err
	}
	return o.Endpoint.validate()
}

// validate checks the schedule and fills its unset fields from def.
func (o *Schedule) validate(def Schedule) error {
	if o.ShardCount < 0 || o.Shard < 0 || (o.ShardCount > 1 && o.Shard >= o.ShardCount) || (o.ShardCount <= 1 && o.Shard > 0) {
		return opterr.New("Shard", fmt.Sprintf("%d/%d", o.Shard, o.ShardCount), "want i/N with 0 <= i < N")
	}
	if !o.StartAt.IsZero() && time.Until(o.StartAt) < -10*time.Second {
		return opterr.New("StartAt", o.StartAt.UTC().Format(time.RFC3339), "passed %s ago; give every shard the same time a little in the future", (-time.Until(o.StartAt)).Round(time.Second))
	}
	if o.Speed == 0 {
		o.Speed = def.Speed
	}
	if !(o.Speed > 0) || math.IsInf(o.Speed, 0) {
		return opterr.New("Speed", o.Speed, "must be a finite positive number")
	}
	if o.Arrival == "" {
		o.Arrival = def.Arrival
	}
	switch o.Arrival {
	case ArrivalPoisson, ArrivalGamma, ArrivalConstant:
	default:
		return opterr.New("Arrival", string(o.Arrival), "use poisson, gamma or constant")
	}
	if o.Burstiness == 0 {
		o.Burstiness = def.Burstiness
	}
	switch {
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return opterr.New("Rate", o.Rate, "must be a finite positive number")
	case !(o.Burstiness > 0) || math.IsInf(o.Burstiness, 0):
		return opterr.New("Burstiness", o.Burstiness, "must be a finite positive number")
	case o.Concurrency < 0:
		return opterr.New("Concurrency", o.Concurrency, "must not be negative")
	case o.MaxConcurrency < 0:
		return opterr.New("MaxConcurrency", o.MaxConcurrency, "must not be negative")
	case o.Concurrency > 0 && (o.Rate > 0 || o.MaxConcurrency > 0):
		return opterr.New("Concurrency", o.Concurrency, "runs closed loop; it does not combine with Rate or MaxConcurrency (use Rate with MaxConcurrency for a capped open loop)")
	case o.WarmupDuration < 0:
		return opterr.New("WarmupDuration", o.WarmupDuration, "must not be negative")
	case o.WarmupRequests < 0:
		return opterr.New("WarmupRequests", o.WarmupRequests, "must not be negative")
	case o.LeadIn < 0:
		return opterr.New("LeadIn", o.LeadIn, "must not be negative")
	case o.LeadIn > 0 && o.From == "":
		return opterr.New("LeadIn", o.LeadIn, "needs From: it is taken from just before the window")
	}
	return nil
}

// validate checks the limits and fills their unset fields from def.
func (o *Limits) validate(def Limits) error {
	if err := notNegative(namedDuration{"ConnectTimeout", o.ConnectTimeout}, namedDuration{"Timeout", o.Timeout}, namedDuration{"Grace", o.Grace},
		namedDuration{"FirstTokenTimeout", o.FirstTokenTimeout}); err != nil {
		return err
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = def.ConnectTimeout
	}
	if o.Timeout == 0 {
		o.Timeout = def.Timeout
	}
	if o.MaxLateness <= 0 {
		o.MaxLateness = def.MaxLateness
	}
	return nil
}

// validate checks the output settings and fills their unset fields from
// def.
func (o *Output) validate(def Output) error {
	if err := notNegative(namedDuration{"RotateEvery", o.RotateEvery}); err != nil {
		return err
	}
	if o.RotateRows <= 0 {
		o.RotateRows = def.RotateRows
	}
	if o.RotateEvery == 0 {
		o.RotateEvery = def.RotateEvery
	}
	if o.OutputSalt.IsZero() {
		o.OutputSalt = anon.RandomSalt()
	}
	return nil
}

// validate checks what to watch and fills its unset fields from def.
func (o *Watch) validate(def Watch) error {
	if err := notNegative(namedDuration{"WaitReady", o.WaitReady}, namedDuration{"WaitIdle", o.WaitIdle}, namedDuration{"SpansWait", o.SpansWait}); err != nil {
		return err
	}
	if o.SpansWait == 0 {
		o.SpansWait = def.SpansWait
	}
	if o.CollectSpans != "" {
		host, port, err := net.SplitHostPort(o.CollectSpans)
		if err != nil || port == "" {
			return opterr.New("CollectSpans", o.CollectSpans, "want host:port, e.g. 127.0.0.1:4317 (the engine exports its spans there)")
		}
		if host != "" && !spans.IsLoopback(host) && !o.AllowRemoteSpans {
			return opterr.New("CollectSpans", o.CollectSpans, "not a loopback address: the receiver would take spans from any host that reaches it; name a loopback address, or set AllowRemoteSpans to listen there")
		}
	}
	if o.MetricsInterval <= 0 {
		o.MetricsInterval = def.MetricsInterval
	}
	if o.WaitIdle > 0 && len(o.metricsOf(RoleEngine)) == 0 {
		return opterr.New("WaitIdle", o.WaitIdle, "needs Metrics with an engine endpoint: the server's metrics say when it is idle")
	}
	for _, m := range o.Metrics {
		if !slices.Contains(MetricsRoles, m.Role) {
			return opterr.New("Metrics", string(m.Role), "is not a role; use engine, gpu or node")
		}
		if u, err := url.Parse(m.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return opterr.New("Metrics", scrub.URL(m.URL), "must be an http:// or https:// URL, e.g. http://127.0.0.1:8000/metrics")
		}
	}
	return nil
}

// validate checks what requests carry and fills its unset fields from
// def.
func (o *Requests) validate(def Requests) error {
	if o.Tokenizer == "" {
		o.Tokenizer = def.Tokenizer
	}
	if !(o.Probes >= 0 && o.Probes <= 1) {
		return opterr.New("Probes", o.Probes, "must be a share within [0, 1]")
	}
	if len(o.UserProbes) > 0 && o.Probes == 0 {
		return opterr.New("UserProbes", len(o.UserProbes), "are sent only with a Probes share above 0")
	}
	switch o.API {
	case "", trace.APIChat, trace.APICompletions:
	default:
		return opterr.New("API", o.API, "use chat or completions")
	}
	switch o.Stream {
	case "", StreamAuto, StreamOn, StreamOff:
	default:
		return opterr.New("Stream", string(o.Stream), "use auto, true or false")
	}
	for _, f := range o.Strip {
		if !slices.Contains(Features, f) {
			return opterr.New("Strip", f, "is not a feature; use %s", strings.Join(Features, ", "))
		}
	}
	if o.ImageTransport == "" {
		o.ImageTransport = ImageTransportData
	}
	if o.ImageTransport != ImageTransportData && o.ImageTransport != ImageTransportURL {
		return opterr.New("ImageTransport", o.ImageTransport, "use data or url")
	}
	if o.ImageFormat == "" {
		o.ImageFormat = "png"
	}
	if o.ImageFormat != "png" && o.ImageFormat != "jpeg" {
		return opterr.New("ImageFormat", o.ImageFormat, "use png or jpeg")
	}
	if len(o.Adapters) > 0 && len(o.AdapterMap) > 0 {
		return opterr.New("Adapters", strings.Join(o.Adapters, ","), "does not combine with AdapterMap: rename adapters one way")
	}
	return nil
}

// validate checks the endpoint, trimming the target's trailing slashes.
func (o *Endpoint) validate() error {
	switch o.HTTP {
	case "", HTTP1, HTTP2:
	default:
		return opterr.New("HTTP", string(o.HTTP), "use 1.1 or 2")
	}
	o.Target = strings.TrimRight(o.Target, "/")
	if u, err := url.Parse(o.Target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return opterr.New("Target", scrub.URL(o.Target), "must be an http:// or https:// base URL, e.g. http://127.0.0.1:8000")
	}
	if !validHeaderValue(o.APIKey) {
		return opterr.New("APIKey", nil, "holds a control character (a line break?): no Authorization header can carry it")
	}
	for k, v := range o.Headers {
		if !validHeaderName(k) || !validHeaderValue(v) {
			return opterr.New("Headers", cleanString(k, 64), "the name must be a token (letters, digits, -) and the value free of control characters")
		}
	}
	return nil
}

// namedDuration is an Options field's name and value, for notNegative.
type namedDuration struct {
	field string
	v     time.Duration
}

// notNegative returns an error naming the first of the durations that is
// negative.
func notNegative(ds ...namedDuration) error {
	for _, d := range ds {
		if d.v < 0 {
			return opterr.New(d.field, d.v, "must not be negative")
		}
	}
	return nil
}

// validHeaderName reports whether k is an HTTP header name (a token).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// ParseWarmup reads a warmup: a duration ("30s") or a request count
// ("100"), for WarmupDuration or WarmupRequests. Its error is an
// *opterr.Error for the field "Warmup" (the pair).
func ParseWarmup(s string) (time.Duration, int, error) {
	if s == "" {
		return 0, 0, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
		if n < 0 {
			return 0, 0, opterr.New("Warmup", s, "must not be negative")
		}
		return 0, n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, 0, opterr.New("Warmup", s, "give a duration (30s) or a request count (100)")
	}
	return d, 0, nil
}

// ParseKeyValues reads "a=b,c=d" (a ModelMap, Labels, Headers). Its error
// quotes the entry at fault: a caller parsing secrets must not show it.
func ParseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// ParseShard reads "i/N" (0 <= i < N). Its error is an *opterr.Error for
// the field "Shard".
func ParseShard(s string) (i, n int32, err error) {
	a, b, ok := strings.Cut(s, "/")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || y < 1 || x < 0 || x >= y {
		return 0, 0, opterr.New("Shard", s, "want i/N with 0 <= i < N, e.g. 0/4")
	}
	return int32(x), int32(y), nil
}

// shardOf returns the shard that sends a request: its session's, so a
// session stays whole, else its own (FNV-1a of the key, modulo n).
func shardOf(q *trace.Request, n int32) int32 {
	key := q.SessionID
	if key == "" {
		key = q.RequestID
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return int32(h.Sum64() % uint64(n))
}
