package replay

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/servetrace/servetrace/replay/scrub"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// The trace reader refuses rows outside their documented ranges, but replay
// is safe on its own: a value no workload can hold never overflows a time,
// waits for ever, panics, or passes for a request that was sent.

// maxBehaviourMs caps the client-behaviour times (think_time_ms,
// cancel_after_ms, read_delay_ms) at the trace's ceiling, a week: longer is
// no client, and nanoseconds past it come near overflowing the schedule's
// arithmetic.
const maxBehaviourMs = trace.MaxClientMs

// maxUsageTokens is the largest usage count a server may report: as many
// tokens as the longest prompt replay builds (tokenize.MaxPromptTokens). A
// count above it, or a negative one, is a protocol error.
const maxUsageTokens = tokenize.MaxPromptTokens

// maxScheduleNs bounds a send time: about 73 years, a quarter of int64
// nanoseconds, so sums of two never overflow.
const maxScheduleNs = math.MaxInt64 / 4

// satNs converts float nanoseconds to int64, clamped to [0, maxScheduleNs];
// NaN is 0.
func satNs(f float64) int64 {
	switch {
	case !(f > 0): // NaN too
		return 0
	case f >= maxScheduleNs:
		return maxScheduleNs
	}
	return int64(f)
}

// satAdd returns a+b clamped to [0, maxScheduleNs], for a, b >= 0.
func satAdd(a, b int64) int64 {
	a, b = max(0, min(a, maxScheduleNs)), max(0, min(b, maxScheduleNs))
	return min(a+b, maxScheduleNs)
}

// notes tallies values replay ignored or capped, for run.json's notes: one
// line per field and reason, with a count and the first request.
type notes struct {
	mu    sync.Mutex
	order []string
	by    map[string]*note
}

type note struct {
	n     int64
	first string
}

func (ns *notes) add(what, requestID string) { ns.addN(what, requestID, 1) }

// addN notes what of n requests at once, the first being requestID.
func (ns *notes) addN(what, requestID string, count int64) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.by == nil {
		ns.by = map[string]*note{}
	}
	n := ns.by[what]
	if n == nil {
		n = &note{first: requestID}
		ns.by[what] = n
		ns.order = append(ns.order, what)
	}
	n.n += count
}

// lines returns the notes, one per field and reason, in the order first seen.
func (ns *notes) lines() []string {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var out []string
	for _, what := range ns.order {
		n := ns.by[what]
		out = append(out, fmt.Sprintf("%s in %d request(s) (first: %s)", what, n.n, strconv.QuoteToASCII(n.first)))
	}
	return out
}

// behaviourMs reads a client-behaviour time in milliseconds. Absent, NaN,
// infinite or negative, it is treated as absent (ok false) and noted; above
// maxBehaviourMs it is capped and noted.
func (r *Runner) behaviourMs(field string, v *float64, requestID string) (time.Duration, bool) {
	switch {
	case v == nil:
		return 0, false
	case math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0:
		r.notes.add(field+" was NaN, infinite or negative and was ignored", requestID)
		return 0, false
	case *v > maxBehaviourMs:
		r.notes.add(fmt.Sprintf("%s was above a week (%d ms) and was capped at it", field, maxBehaviourMs), requestID)
		return maxBehaviourMs * time.Millisecond, true
	}
	return time.Duration(*v * float64(time.Millisecond)), true
}

// validHeaderValue reports whether v may be sent as an HTTP header value:
// no control character but the tab (as net/http checks before sending).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// cleanString returns s as a result row may hold it: valid UTF-8, control
// characters (which the trace reader refuses) replaced by U+FFFD, at most
// max bytes.
func cleanString(s string, maxBytes int) string {
	ok := utf8.ValidString(s) && len(s) <= maxBytes
	for i := 0; ok && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == 0xc2 && i+1 < len(s) && s[i+1] < 0xa0 {
			ok = false
		}
	}
	if ok {
		return s
	}
	s = strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0 {
			return utf8.RuneError
		}
		return c
	}, strings.ToValidUTF8(s, string(utf8.RuneError)))
	for len(s) > maxBytes {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// maxRecordedString bounds the strings of a result row (the trace
// reader's limit for every string column).
const maxRecordedString = 1024

// makeRecordable fixes what a result copied from a request the reader would
// refuse, so the run stays readable: ids and strings cleaned, token counts
// clamped to [0, tokenize.MaxPromptTokens], a non-finite sampling parameter
// dropped. What it changed is noted.
func (r *Runner) makeRecordable(res *trace.Result) {
	id := res.RequestID
	for _, f := range []struct {
		name string
		s    *string
	}{{"request_id", &res.RequestID}, {"session_id", &res.SessionID}, {"tenant", &res.Tenant}, {"model", &res.Model}, {"adapter", &res.Adapter}, {"phase", &res.Phase}} {
		if c := cleanString(*f.s, maxRecordedString); c != *f.s {
			*f.s = c
			r.notes.add(f.name+" held invalid UTF-8, a control character or over 1024 bytes and was recorded cleaned", id)
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"input_tokens", &res.InputTokens}, {"output_tokens", &res.OutputTokens}, {"max_tokens", &res.MaxTokens}} {
		if c := max(0, min(*f.v, tokenize.MaxPromptTokens)); c != *f.v {
			*f.v = c
			r.notes.add(fmt.Sprintf("%s was negative or above %d and was recorded clamped", f.name, tokenize.MaxPromptTokens), id)
		}
	}
	for _, f := range []struct {
		name string
		v    **float64
	}{{"temperature", &res.Temperature}, {"top_p", &res.TopP}} {
		if *f.v != nil && (math.IsNaN(**f.v) || math.IsInf(**f.v, 0)) {
			*f.v = nil
			r.notes.add(f.name+" was NaN or infinite and was recorded absent", id)
		}
	}
	if res.Turn < 0 {
		res.Turn = 0
	}
	if len(res.Features) > 0 {
		res.Features = slices.Clone(res.Features)
		for i, f := range res.Features {
			res.Features[i] = cleanString(f, maxRecordedString)
		}
	}
}

// knownFinishReasons are the finish reasons servers send; any other is
// scrubbed and cleaned before it is recorded.
var knownFinishReasons = map[string]bool{"stop": true, "length": true, "tool_calls": true, "content_filter": true, "function_call": true, "eos": true, "abort": true}

// maxFinishReason bounds a recorded finish reason.
const maxFinishReason = 64

// recordedFinish returns a server's finish reason as it may be written:
// scrubbed of secrets and request text, cleaned, at most maxFinishReason
// bytes.
func (r *Runner) recordedFinish(s string, body []byte) string {
	if s == "" || knownFinishReasons[s] {
		return s
	}
	return cleanString(scrub.Message(s, body, r.scrub), maxFinishReason)
}

// origin is a URL's scheme, host and port, the port made explicit.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}
