package peer

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// guidellm (vllm-project/guidellm) writes benchmarks.json: a report whose
// benchmarks (one per strategy or rate of a sweep) each hold a duration,
// metrics and the request records split by status — shape from
// src/guidellm/benchmark/schemas/report.py and benchmark.py, the records
// GenerativeRequestStats (src/guidellm/schemas/request_stats.py):
// request_start_time (unix s), request_latency (s),
// time_to_first_token_ms, prompt_tokens, output_tokens. Reports before
// v0.4 name the times start_time, end_time and first_token_time; both are
// read. A v0.2 report (src/guidellm/benchmark/benchmark.py and
// output.py at v0.2.1) has no report-level args: each benchmark keeps its
// strategy in args.strategy (type_, rate, streams, max_concurrency), its
// model in worker.backend_model (and request_loader.processor), its
// backend in worker.backend_type and its counts in total_count.

func init() {
	register(format{tool: "guidellm", match: isGuidellm, read: readGuidellm})
}

func isGuidellm(o object) bool {
	if !o.has("benchmarks") {
		return false
	}
	c, err := o.array("benchmarks")
	if err != nil {
		return false
	}
	defer c.close()
	b, err := c.nextObject(o.file, o.src)
	return err == nil && b.has("requests", "metrics")
}

// guidellmStrategy is a benchmark's scheduling strategy.
type guidellmStrategy struct {
	Type           string   `json:"type_"`
	Rate           *float64 `json:"rate"`
	Streams        *anyInt  `json:"streams"`         // concurrent
	MaxConcurrency *anyInt  `json:"max_concurrency"` // throughput, constant, poisson
}

// guidellmBenchmark is what a benchmark holds beside its requests: v0.4
// and later in config and metrics.request_totals, v0.2 in args, worker,
// request_loader and total_count.
type guidellmBenchmark struct {
	Config struct {
		Strategy guidellmStrategy `json:"strategy"`
	} `json:"config"`
	Args struct {
		Strategy guidellmStrategy `json:"strategy"`
	} `json:"args"`
	Worker struct {
		BackendType  string `json:"backend_type"`
		BackendModel string `json:"backend_model"`
	} `json:"worker"`
	Loader struct {
		Processor string `json:"processor"`
	} `json:"request_loader"`
	Duration float64 `json:"duration"`
	Metrics  struct {
		Totals struct {
			Successful *anyInt `json:"successful"`
		} `json:"request_totals"`
	} `json:"metrics"`
	TotalCount struct {
		Successful *anyInt `json:"successful"`
	} `json:"total_count"`
}

// strategy is the benchmark's strategy wherever its version keeps it.
func (b *guidellmBenchmark) strategy() guidellmStrategy {
	if b.Config.Strategy.Type != "" {
		return b.Config.Strategy
	}
	return b.Args.Strategy
}

type guidellmRequest struct {
	RequestStart   *float64 `json:"request_start_time"`
	StartTime      *float64 `json:"start_time"`
	FirstTokenTime *float64 `json:"first_token_time"`
	EndTime        *float64 `json:"end_time"`
	Latency        *float64 `json:"request_latency"`
	TTFTMs         *float64 `json:"time_to_first_token_ms"`
	PromptTokens   *anyInt  `json:"prompt_tokens"`
	OutputTokens   *anyInt  `json:"output_tokens"`
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

// guidellmLists are a benchmark's request records by status: successful,
// errored (failed), incomplete (cancelled).
var guidellmLists = []struct {
	key        string
	ok, cancel bool
}{{"successful", true, false}, {"errored", false, false}, {"incomplete", false, true}}

// readGuidellm reads every benchmark of a guidellm report as a run. The
// records keep per-request means, not token times: a request's tokens
// are its first at TTFT and its end at its latency, so ITL is not
// reported from them.
func readGuidellm(o object) ([]Run, error) {
	src := o.src
	var md struct {
		Version string `json:"guidellm_version"`
	}
	var args struct {
		Model   *string `json:"model"`
		Backend any     `json:"backend"`
	}
	if err := errors.Join(o.decode("metadata", &md), o.decode("args", &args)); err != nil {
		return nil, fmt.Errorf("fields of the wrong type: %w", err)
	}
	model := ""
	if args.Model != nil {
		model = *args.Model // the report's args (BenchmarkGenerativeTextArgs), as guidellm ran
	}
	backend, _ := args.Backend.(string)
	tool := "guidellm"
	if md.Version != "" {
		tool += " " + md.Version
	}
	c, err := o.array("benchmarks")
	if err != nil {
		return nil, err
	}
	defer c.close()
	var runs []Run
	for bi := 0; ; bi++ {
		label := fmt.Sprintf("%s[%d]", src, bi)
		b, err := c.nextObject(o.file, label)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("benchmark %d: %w", bi, err)
		}
		var bm guidellmBenchmark
		for _, k := range []struct {
			key  string
			into any
		}{{"config", &bm.Config}, {"args", &bm.Args}, {"worker", &bm.Worker}, {"request_loader", &bm.Loader}, {"duration", &bm.Duration},
			{"metrics", &bm.Metrics}, {"total_count", &bm.TotalCount}} {
			if err := b.decode(k.key, k.into); err != nil {
				return nil, fmt.Errorf("benchmark %d: fields of the wrong type: %w", bi, err)
			}
		}
		reqs, err := b.child("requests", label)
		if err != nil {
			return nil, fmt.Errorf("benchmark %d: %w", bi, err)
		}
		st := bm.strategy()
		r := Run{Tool: tool, Source: label, ID: runID("guidellm", label) + "-" + st.Type, Model: cmp.Or(model, bm.Worker.BackendModel, bm.Loader.Processor),
			Backend: cmp.Or(backend, bm.Worker.BackendType), DurationS: bm.Duration, Completed: -1, sampled: true}
		if st.Rate != nil {
			r.OfferedRate = *st.Rate
		}
		switch {
		case st.Type == "synchronous":
			r.MaxConcurrency = 1
		case st.Streams != nil:
			r.MaxConcurrency = int(*st.Streams)
		case st.MaxConcurrency != nil:
			r.MaxConcurrency = int(*st.MaxConcurrency)
		}
		if s := cmp.Or(bm.Metrics.Totals.Successful, bm.TotalCount.Successful); s != nil {
			r.Completed = int64(*s)
		}
		// A request cancelled while still queued has no start time: it was
		// never sent, and is counted in a note; a successful one without
		// it is a cut file.
		t0, unsent := math.Inf(1), 0
		err = eachGuidellm(reqs, bi, func(q guidellmRequest, ok, _ bool, i int) error {
			s, has := q.start()
			if !has && ok {
				return fmt.Errorf("benchmark %d request %d: a successful request without request_start_time: the file is cut or edited", bi, i)
			}
			if has && math.Abs(s) < 1e15 {
				t0 = math.Min(t0, s)
			}
			if !has {
				unsent++
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		r.records = func(fn func(q *Request) error) error {
			return eachGuidellm(reqs, bi, func(x guidellmRequest, ok, canc bool, _ int) error {
				s, has := x.start()
				if !has {
					return nil
				}
				q := guidellmToRequest(x, s-t0, s, ok, canc)
				return fn(&q)
			})
		}
		if unsent > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d requests ended before they were sent (no start time) and are left out", label, unsent))
		}
		if kept := reqs.elems("successful"); r.Completed > kept && r.Completed <= maxCompleted {
			r.Notes = append(r.Notes, fmt.Sprintf("%s keeps %d of its %d successful requests (guidellm samples its records): intervals are over that sample", label, kept, r.Completed))
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s: guidellm keeps no token times, so ITL is not reported from it", label))
		runs = append(runs, r)
	}
	return runs, nil
}

// eachGuidellm decodes a benchmark's requests one at a time, by status,
// with each one's index within its status's list.
func eachGuidellm(reqs object, bi int, fn func(q guidellmRequest, ok, cancelled bool, i int) error) error {
	for _, l := range guidellmLists {
		c, err := reqs.array(l.key)
		if err != nil {
			return fmt.Errorf("benchmark %d: %w", bi, err)
		}
		for i := 0; ; i++ {
			raw, err := c.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				c.close()
				return fmt.Errorf("benchmark %d %s request %d: %w", bi, l.key, i, err)
			}
			var q guidellmRequest
			if err := json.Unmarshal(raw, &q); err != nil {
				c.close()
				return fmt.Errorf("benchmark %d %s request %d: fields of the wrong type: %w", bi, l.key, i, err)
			}
			if err := fn(q, l.ok, l.cancel, i); err != nil {
				c.close()
				return err
			}
		}
		c.close()
	}
	return nil
}

// guidellmToRequest converts one record sent at unix time s, sent seconds
// after the benchmark's first send.
func guidellmToRequest(x guidellmRequest, sent, s float64, ok, canc bool) Request {
	q := Request{SentNs: secondsToNs(sent), OK: ok, Cancelled: canc, TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: -1, Streamed: true}
	if p := x.PromptTokens; p != nil {
		q.InputTokens = countOf(*p)
	}
	if !ok {
		q.Error = x.Info.Error + x.Error
		return q
	}
	if o := x.OutputTokens; o != nil {
		q.OutputTokens = countOf(*o)
	}
	switch {
	case x.TTFTMs != nil:
		q.TTFTNs = msToNs(*x.TTFTMs)
	case x.FirstTokenTime != nil:
		q.TTFTNs = secondsToNs(*x.FirstTokenTime - s)
	}
	switch {
	case x.Latency != nil:
		q.E2ENs = secondsToNs(*x.Latency)
	case x.EndTime != nil:
		q.E2ENs = secondsToNs(*x.EndTime - s)
	}
	return q
}
