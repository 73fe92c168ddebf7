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
	r, err := newRunner(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cut := newScraper(slow.URL, dir, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	cut.scrape(ctx, "during", 0)
	if len(cut.files) != 0 {
		t.Errorf("a scrape cut by the run's end wrote %v", cut.files)
	}
	failed := newScraper(down.URL, dir, r)
	failed.scrape(context.Background(), "during", 0)
	if len(failed.files) != 1 {
		t.Fatalf("a failed scrape wrote %v, want one file", failed.files)
	}
	b, err := os.ReadFile(filepath.Join(dir, failed.files[0]))
	if err != nil || !strings.Contains(string(b), "# scrape failed") {
		t.Errorf("the failed scrape's file: %q, %v", b, err)
	}
}
