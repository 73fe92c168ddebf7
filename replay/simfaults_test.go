package replay

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// TestSimFaultsAndFeaturesReachTheClient turns on each simulator fault and
// feature alone and checks what the client records.
func TestSimFaultsAndFeaturesReachTheClient(t *testing.T) {
	cases := []struct {
		name    string
		sim     func(*sim.Options)
		replay  func(*Options)
		outcome string
		check   func(t *testing.T, r trace.Result)
	}{
		{"500 before the first byte", func(o *sim.Options) { o.FailRate = 1 }, nil, trace.OutcomeHTTPError, nil},
		{"error object mid-stream", func(o *sim.Options) { o.StreamErrorRate = 1 }, nil, trace.OutcomeStreamError, nil},
		{"connection reset mid-stream", func(o *sim.Options) { o.ResetRate = 1 }, nil, trace.OutcomeConnError, func(t *testing.T, r trace.Result) {
			if r.MaxTokens >= 4 && len(r.TokenTimesNs) == 0 {
				t.Errorf("%s: tokens received before the reset were not kept", r.RequestID)
			}
		}},
		{"malformed SSE mid-stream", func(o *sim.Options) { o.MalformedRate = 1 }, nil, trace.OutcomeProtocolError, nil},
		{"stall past the timeout", func(o *sim.Options) { o.StallRate, o.StallFor = 1, 2*time.Second },
			func(o *Options) { o.Timeout = 400 * time.Millisecond }, trace.OutcomeTimeout, nil},
		{"slow first byte past the first-token timeout", func(o *sim.Options) { o.SlowFirstByteRate, o.SlowFirstByteFor = 1, time.Second },
			func(o *Options) { o.FirstTokenTimeout = 300 * time.Millisecond }, trace.OutcomeTimeout, nil},
		{"four tokens per event", func(o *sim.Options) { o.TokensPerChunk = 4 }, nil, trace.OutcomeOK, func(t *testing.T, r trace.Result) {
			if want := (r.MaxTokens + 3) / 4; int64(len(r.TokenTimesNs)) != want || r.ObservedOutputTokens != r.MaxTokens {
				t.Errorf("%s: %d events for %d tokens, want %d events", r.RequestID, len(r.TokenTimesNs), r.ObservedOutputTokens, want)
			}
		}},
		{"reasoning before content", func(o *sim.Options) { o.ReasoningRatio = 0.5 }, func(o *Options) { o.API = trace.APIChat }, trace.OutcomeOK, func(t *testing.T, r trace.Result) {
			if want := r.MaxTokens / 2; r.ObservedReasoningTokens != want {
				t.Errorf("%s: %d reasoning tokens of %d, want %d", r.RequestID, r.ObservedReasoningTokens, r.MaxTokens, want)
			}
		}},
		{"early stops", func(o *sim.Options) { o.StopRate = 1 }, nil, trace.OutcomeOK, func(t *testing.T, r trace.Result) {
			if r.ObservedFinishReason != "stop" && r.ObservedOutputTokens != r.MaxTokens || r.ObservedOutputTokens > r.MaxTokens {
				t.Errorf("%s: finish %q with %d of %d tokens", r.RequestID, r.ObservedFinishReason, r.ObservedOutputTokens, r.MaxTokens)
			}
		}},
		{"early stops overruled by --force-output-len", func(o *sim.Options) { o.StopRate = 1 }, func(o *Options) { o.ForceOutputLen = true }, trace.OutcomeOK, func(t *testing.T, r trace.Result) {
			if r.ObservedFinishReason != "length" || r.ObservedOutputTokens != r.MaxTokens {
				t.Errorf("%s: finish %q with %d of %d tokens", r.RequestID, r.ObservedFinishReason, r.ObservedOutputTokens, r.MaxTokens)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := fastSim()
			c.sim(&o)
			target := startSim(t, o)
			wl := workload(t, 12, 10*time.Millisecond)
			run := filepath.Join(t.TempDir(), "run")
			opts := DefaultOptions()
			opts.Target = target
			if c.replay != nil {
				c.replay(&opts)
			}
			if _, err := Run(context.Background(), wl, run, opts); err != nil {
				t.Fatal(err)
			}
			rows, _ := trace.ReadResults(run)
			if len(rows) != 12 {
				t.Fatalf("%d results, want 12", len(rows))
			}
			stops := 0
			for _, r := range rows {
				if r.Outcome != c.outcome {
					t.Errorf("%s: outcome %s (%s), want %s", r.RequestID, r.Outcome, r.Error, c.outcome)
				}
				if c.check != nil {
					c.check(t, r)
				}
				if r.ObservedFinishReason == "stop" {
					stops++
				}
			}
			// max_tokens is 1..7 here; a uniform stop length equals max_tokens
			// (a "length" finish) with chance 1/max_tokens: about 5 of 12 stop.
			if c.name == "early stops" && stops < 2 {
				t.Errorf("only %d of 12 requests stopped early at stop rate 1", stops)
			}
		})
	}
}
