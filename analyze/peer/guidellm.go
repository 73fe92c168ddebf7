package peer

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// guidellm (vllm-project/guidellm) writes benchmarks.json: a report whose
// benchmarks (one per strategy or rate of a sweep) each hold a duration,
// metrics and the request records split by status — shape from
// src/guidellm/benchmark/schemas/report.py and benchmark.py, the records
// GenerativeRequestStats (src/guidellm/schemas/request_stats.py):
// request_start_time (unix s), request_latency (s),
// time_to_first_token_ms, prompt_tokens, output_tokens. Reports before
// v0.4 name the times start_time, end_time and first_token_time; both are
// read.

func init() {
	register(format{tool: "guidellm", match: isGuidellm, read: readGuidellm})
}

func isGuidellm(obj map[string]json.RawMessage) bool {
	if !has(obj, "benchmarks") {
		return false
	}
	var bs []map[string]json.RawMessage
	if json.Unmarshal(obj["benchmarks"], &bs) != nil || len(bs) == 0 {
		return false
	}
	return has(bs[0], "requests", "metrics")
}

type guidellmReport struct {
	Metadata struct {
		Version string `json:"guidellm_version"`
	} `json:"metadata"`
	Benchmarks []struct {
		Config struct {
			Strategy struct {
				Type string   `json:"type_"`
				Rate *float64 `json:"rate"`
			} `json:"strategy"`
		} `json:"config"`
		Duration float64 `json:"duration"`
		Metrics  struct {
			Totals struct {
				Successful *int64 `json:"successful"`
			} `json:"request_totals"`
		} `json:"metrics"`
		Requests struct {
			Successful []guidellmRequest `json:"successful"`
			Incomplete []guidellmRequest `json:"incomplete"`
			Errored    []guidellmRequest `json:"errored"`
		} `json:"requests"`
	} `json:"benchmarks"`
}

type guidellmRequest struct {
	RequestStart   *float64 `json:"request_start_time"`
	StartTime      *float64 `json:"start_time"`
	FirstTokenTime *float64 `json:"first_token_time"`
	EndTime        *float64 `json:"end_time"`
	Latency        *float64 `json:"request_latency"`
	TTFTMs         *float64 `json:"time_to_first_token_ms"`
	PromptTokens   *int64   `json:"prompt_tokens"`
	OutputTokens   *int64   `json:"output_tokens"`
	Info           struct {
		Error string `json:"error"`
	} `json:"info"`
	Error string `json:"error"`
}

// start returns a record's send time in unix seconds.
func (q guidellmRequest) start() (float64, bool) {
	if q.RequestStart != nil {
		return *q.RequestStart, true
	}
	if q.StartTime != nil {
		return *q.StartTime, true
	}
	return 0, false
}

// readGuidellm reads every benchmark of a guidellm report as a run. The
// records keep per-request means, not token times: a request's tokens
// are its first at TTFT and its end at its latency, so ITL is not
// reported from them.
func readGuidellm(obj map[string]json.RawMessage, src string) ([]Run, error) {
	var g guidellmReport
	b, _ := json.Marshal(obj)
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("fields of the wrong type: %w", err)
	}
	tool := "guidellm"
	if g.Metadata.Version != "" {
		tool += " " + g.Metadata.Version
	}
	var runs []Run
	for bi, bm := range g.Benchmarks {
		label := fmt.Sprintf("%s[%d]", src, bi)
		r := Run{Tool: tool, Source: label, ID: runID("guidellm", label) + "-" + bm.Config.Strategy.Type, DurationS: bm.Duration, Completed: -1}
		if bm.Config.Strategy.Rate != nil {
			r.OfferedRate = *bm.Config.Strategy.Rate
		}
		if s := bm.Metrics.Totals.Successful; s != nil {
			r.Completed = *s
		}
		type rec struct {
			q    guidellmRequest
			ok   bool
			canc bool
		}
		var recs []rec
		for _, q := range bm.Requests.Successful {
			recs = append(recs, rec{q, true, false})
		}
		for _, q := range bm.Requests.Errored {
			recs = append(recs, rec{q, false, false})
		}
		for _, q := range bm.Requests.Incomplete {
			recs = append(recs, rec{q, false, true})
		}
		// A request cancelled while still queued has no start time: it was
		// never sent, and is counted in a note; a successful one without
		// it is a cut file.
		t0, unsent := math.Inf(1), 0
		for i, x := range recs {
			s, ok := x.q.start()
			if !ok && x.ok {
				return nil, fmt.Errorf("benchmark %d request %d: a successful request without request_start_time: the file is cut or edited", bi, i)
			}
			if ok {
				t0 = math.Min(t0, s)
			}
		}
		r.Requests = []Request{}
		for _, x := range recs {
			s, ok := x.q.start()
			if !ok {
				unsent++
				continue
			}
			q := Request{SentNs: secondsToNs(s - t0), OK: x.ok, Cancelled: x.canc, TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: -1, Streamed: true}
			if p := x.q.PromptTokens; p != nil {
				q.InputTokens = *p
			}
			if x.ok {
				if o := x.q.OutputTokens; o != nil {
					q.OutputTokens = *o
				}
				switch {
				case x.q.TTFTMs != nil:
					q.TTFTNs = msToNs(*x.q.TTFTMs)
				case x.q.FirstTokenTime != nil:
					q.TTFTNs = secondsToNs(*x.q.FirstTokenTime - s)
				}
				switch {
				case x.q.Latency != nil:
					q.E2ENs = secondsToNs(*x.q.Latency)
				case x.q.EndTime != nil:
					q.E2ENs = secondsToNs(*x.q.EndTime - s)
				}
			} else {
				q.Error = x.q.Info.Error + x.q.Error
			}
			r.Requests = append(r.Requests, q)
		}
		sort.SliceStable(r.Requests, func(i, j int) bool { return r.Requests[i].SentNs < r.Requests[j].SentNs })
		if unsent > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d requests ended before they were sent (no start time) and are left out", label, unsent))
		}
		if r.Completed > int64(len(bm.Requests.Successful)) {
			r.Notes = append(r.Notes, fmt.Sprintf("%s keeps %d of its %d successful requests (guidellm samples its records): intervals are over that sample", label, len(bm.Requests.Successful), r.Completed))
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s: guidellm keeps no token times, so ITL is not reported from it", label))
		runs = append(runs, r)
	}
	return runs, nil
}
