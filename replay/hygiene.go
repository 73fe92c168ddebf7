package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/promtext"
	"github.com/servetrace/servetrace/internal/servermetrics"
	"github.com/servetrace/servetrace/replay/scrub"
	"github.com/servetrace/servetrace/trace"
)

// waitReady polls the endpoint's /health, then /v1/models, until one
// answers 200 or limit passes, and returns how long that took.
func (r *Runner) waitReady(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		for _, path := range []string{"/health", "/v1/models"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.endpoint(path), nil)
			if err != nil {
				return 0, err
			}
			r.setHeaders(req)
			if resp, err := r.client.Do(req); err == nil {
				io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return time.Since(start), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, opterr.New("WaitReady", limit, "endpoint %s was not ready within it (polled /health and /v1/models)", scrub.URL(r.opts.Target))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scraper fetches one endpoint's Prometheus metrics into the run dir:
// metrics/<prefix>NNNNN.prom (see scrapePrefix), each starting with a
// comment that says when, in which phase of the run and from which role it
// was taken.
type scraper struct {
	url    string
	role   MetricsRole
	prefix string
	dir    string
	client *http.Client
	opts   *Options        // for redirect notes
	scrub  *scrub.Scrubber // what a scrape file holds is scrubbed first
	mu     sync.Mutex
	seq    int
	files  []string
	// kept counts the bytes the run's scrapes, of every endpoint, have
	// written (the Runner's); note says when they reach maxScrapesBytes.
	kept *atomic.Int64
	note func(string)
}

// maxScrape bounds one metrics scrape (a variable for tests).
var maxScrape = 32 << 20

// maxScrapesBytes bounds what a run's scrapes write in all: an endpoint
// answering maxScrape every interval would fill a disk in hours, where a
// real engine's scrapes of a day take a few GB. Past it a scrape is kept
// as a failed one, a gap analyze shows, not as its text (a variable for
// tests).
var maxScrapesBytes int64 = 8 << 30

// newScraper prepares the scrapes of endpoint i of the run's Metrics into
// runDir/metrics, created on first write.
func newScraper(i int, runDir string, r *Runner) *scraper {
	ep := r.opts.Metrics[i]
	return &scraper{url: ep.URL, role: ep.Role, prefix: scrapePrefix(r.opts.Metrics, i), dir: filepath.Join(runDir, "metrics"), client: r.client, opts: &r.opts, scrub: r.scrub,
		kept: &r.scrapeBytes, note: func(s string) { r.notes.add(s, "") }}
}

// fetch returns the metrics text and, for an answer longer than
// maxScrape, how long the part kept is: its first maxScrape bytes, cut
// back to the last whole line.
func (s *scraper) fetch(ctx context.Context) (body []byte, cutAt int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	where := scrub.URL(s.url)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("metrics URL %s: %v", where, s.scrub.Scrub(err.Error()))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("scrape %s: %v", where, s.scrub.Scrub(shortTransport(err)))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxScrape)+1))
	if err != nil {
		return nil, 0, fmt.Errorf("scrape %s: %v", where, s.scrub.Scrub(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("scrape %s: %s", where, s.opts.httpStatusError(resp))
	}
	if len(b) > maxScrape {
		b = b[:bytes.LastIndexByte(b[:maxScrape], '\n')+1]
		return b, len(b), nil
	}
	return b, 0, nil
}

// scrape fetches once and writes the result; a failed scrape is written
// as a comment, so gaps are visible. A scrape cut short because ctx ended
// (the run's measurement ended while it was in flight) measured nothing
// and failed nothing: no file, as if it had not begun.
func (s *scraper) scrape(ctx context.Context, phase string, atNs int64) {
	body, cutAt, err := s.fetch(ctx)
	if err != nil && ctx.Err() != nil {
		return
	}
	if err == nil && s.kept.Add(int64(len(body))) > maxScrapesBytes {
		err = fmt.Errorf("not kept: the run's scrapes passed %d MiB in all, the most a run keeps", maxScrapesBytes>>20)
		body, cutAt = nil, 0
		s.note(fmt.Sprintf("metrics scrapes past %d MiB in all were not kept, each such file saying so", maxScrapesBytes>>20))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := fmt.Sprintf("%s%05d.prom", s.prefix, s.seq)
	s.seq++
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# servetrace scrape phase=%s run_ns=%d unix_ns=%d role=%s\n", phase, atNs, time.Now().UnixNano(), s.role)
	if cutAt > 0 {
		fmt.Fprintf(&buf, "%s the answer passed %d bytes; its first %d, to the last whole line, are kept\n", trace.ScrapeCutPrefix, maxScrape, cutAt)
	}
	if err != nil {
		fmt.Fprintf(&buf, "# scrape failed: %s\n", oneLine(s.scrub.Scrub(err.Error())))
	} else {
		buf.WriteString(s.scrub.ScrubLines(string(body)))
	}
	if writeNew(s.dir, name, buf.Bytes()) == nil {
		s.files = append(s.files, "metrics/"+name)
	}
}

// writeNew writes b as the new file name in dir, making dir first; neither
// is written through a link planted in its place.
func writeNew(dir, name string, b []byte) error {
	if err := trace.MakeDir(dir); err != nil {
		return err
	}
	f, err := trace.CreateFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// run scrapes every interval until ctx ends.
func (s *scraper) run(ctx context.Context, interval time.Duration, clock func() int64) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.scrape(ctx, "during", clock())
		}
	}
}

// busyCount sums the gauges of requests running or waiting in a
// Prometheus text exposition; found is false when none of them appears.
func busyCount(text []byte) (total float64, found bool) {
	promtext.Scan(string(text), func(s promtext.Sample) {
		if k := servermetrics.KindOf(s.Name); k == servermetrics.Running || k == servermetrics.Waiting {
			total, found = total+s.Value, true
		}
	}, nil)
	return total, found
}

// waitIdle waits until the server reports no running or waiting requests.
func (s *scraper) waitIdle(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	last := "no scrape succeeded"
	for {
		body, _, err := s.fetch(ctx)
		if err == nil {
			n, found := busyCount(body)
			if !found {
				return opterr.New("WaitIdle", nil, "%s reports none of %s; it cannot tell when the server is idle", scrub.URL(s.url), servermetrics.Names(servermetrics.Running, servermetrics.Waiting))
			}
			if n == 0 {
				return nil
			}
			last = fmt.Sprintf("%.0f requests still running or waiting", n)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return opterr.New("WaitIdle", limit, "the server did not become idle within it: %s", last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// modelsAnswer fetches /v1/models as raw JSON for run.json, with the
// Server header.
func (r *Runner) modelsAnswer(ctx context.Context) (any, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.endpoint("/v1/models"), nil)
	if err != nil {
		return trace.NotRecorded, trace.NotRecorded
	}
	r.setHeaders(req)
	resp, err := r.client.Do(req)
	if err != nil {
		return trace.NotRecorded, trace.NotRecorded
	}
	defer resp.Body.Close()
	// Both are the server's words, and a gateway may echo the request's
	// headers in them.
	server := cleanString(r.scrub.Scrub(resp.Header.Get("Server")), maxRecordedString)
	if server == "" {
		server = trace.NotRecorded
	}
	var v any
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v) != nil {
		return trace.NotRecorded, server
	}
	return r.scrub.ScrubJSON(v), server
}

// oneLine joins a text's lines with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// scrapers are a run's scrapers, one per metrics endpoint.
type scrapers []*scraper

// scrape takes one scrape of every endpoint.
func (ss scrapers) scrape(ctx context.Context, phase string, atNs int64) {
	for _, s := range ss {
		s.scrape(ctx, phase, atNs)
	}
}

// files lists the scrape files written, endpoint by endpoint.
func (ss scrapers) files() []string {
	var out []string
	for _, s := range ss {
		s.mu.Lock()
		out = append(out, s.files...)
		s.mu.Unlock()
	}
	return out
}

// WaitIdle waits up to o.WaitIdle for every engine endpoint of o.Metrics
// to report no running or waiting requests, as Run does before it starts,
// and returns how long that took: for a caller that starts runs of its own
// at a set time.
func WaitIdle(ctx context.Context, o Options) (time.Duration, error) {
	r, err := newRunner(o)
	if err != nil {
		return 0, err
	}
	defer r.client.CloseIdleConnections()
	return r.waitIdleEngines(ctx, "")
}

// waitIdleEngines waits for each engine endpoint in turn to report the
// server idle, and returns how long that took.
func (r *Runner) waitIdleEngines(ctx context.Context, runDir string) (time.Duration, error) {
	start := time.Now()
	for i, ep := range r.opts.Metrics {
		if ep.Role != RoleEngine {
			continue
		}
		if err := newScraper(i, runDir, r).waitIdle(ctx, r.opts.WaitIdle); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
