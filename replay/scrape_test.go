package replay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScrapeCutByTheRunsEndWritesNothing: a scrape still in flight when
// the run's measurement ends measured nothing; it leaves no file (a
// "scrape failed" file there made a provenance test fail one run in
// several under -race), while a scrape the server fails is written as a
// failure.
func TestScrapeCutByTheRunsEndWritesNothing(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer slow.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no metrics here", http.StatusNotFound)
	}))
	defer down.Close()
	o := DefaultOptions()
	o.Metrics = []MetricsEndpoint{{Role: RoleEngine, URL: slow.URL}, {Role: RoleGPU, URL: down.URL}}
	r, err := newRunner(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cut := newScraper(0, dir, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	cut.scrape(ctx, "during", 0)
	if len(cut.files) != 0 {
		t.Errorf("a scrape cut by the run's end wrote %v", cut.files)
	}
	failed := newScraper(1, dir, r)
	failed.scrape(context.Background(), "during", 0)
	if len(failed.files) != 1 {
		t.Fatalf("a failed scrape wrote %v, want one file", failed.files)
	}
	b, err := os.ReadFile(filepath.Join(dir, failed.files[0]))
	if err != nil || !strings.Contains(string(b), "# scrape failed") {
		t.Errorf("the failed scrape's file: %q, %v", b, err)
	}
	// The second endpoint, a GPU exporter, writes under its role's name.
	if failed.files[0] != "metrics/gpu-scrape-00000.prom" || !strings.Contains(string(b), " role=gpu") {
		t.Errorf("the GPU endpoint's scrape is %s: %q", failed.files[0], b)
	}
}

func TestScrapePrefixByRoleAndRank(t *testing.T) {
	eps := []MetricsEndpoint{{Role: RoleGPU}, {Role: RoleEngine}, {Role: RoleGPU}, {Role: RoleEngine}, {Role: RoleNode}}
	want := []string{"gpu-scrape-", "scrape-", "gpu2-scrape-", "engine2-scrape-", "node-scrape-"}
	for i := range eps {
		if got := scrapePrefix(eps, i); got != want[i] {
			t.Errorf("endpoint %d (%s): prefix %q, want %q", i, eps[i].Role, got, want[i])
		}
	}
	for _, c := range []struct {
		in   string
		want MetricsEndpoint
		err  bool
	}{
		{"http://h:8000/metrics", MetricsEndpoint{RoleEngine, "http://h:8000/metrics"}, false},
		{"gpu=http://h:9400/metrics", MetricsEndpoint{RoleGPU, "http://h:9400/metrics"}, false},
		{"http://h/m?a=b", MetricsEndpoint{RoleEngine, "http://h/m?a=b"}, false},
		{"disk=http://h/m", MetricsEndpoint{}, true},
	} {
		got, err := ParseMetricsEndpoint(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseMetricsEndpoint(%q) = %+v, %v", c.in, got, err)
		}
	}
}
