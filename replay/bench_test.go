package replay

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// BenchmarkSSEParse measures parsing a 256-token chat stream through the
// timestamping reader and chunk decoder.
func BenchmarkSSEParse(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for range 256 {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":256}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	r := testRunner("http://unused")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		res := trace.Result{SentNs: trace.Ptr(int64(0))}
		r.readStream(context.Background(), io.NopCloser(bytes.NewReader(body)), &res, behaviour{})
		if res.Outcome != trace.OutcomeOK || len(res.TokenTimesNs) != 256 {
			b.Fatal(res.Outcome, len(res.TokenTimesNs))
		}
	}
	b.ReportMetric(float64(258*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkScheduleLag measures how late waitUntil wakes for a due time
// 2 ms ahead: the pacer's own contribution to send lateness.
func BenchmarkScheduleLag(b *testing.B) {
	start := time.Now()
	r := &Runner{start: start, clock: monotonicClock(start)}
	lags := make([]float64, 0, 1024)
	for b.Loop() {
		due := r.clock() + int64(2*time.Millisecond)
		r.waitUntil(context.Background(), due)
		lags = append(lags, float64(r.clock()-due))
	}
	slices.Sort(lags)
	b.ReportMetric(lags[len(lags)/2], "lag-p50-ns")
	b.ReportMetric(lags[len(lags)*99/100], "lag-p99-ns")
}
