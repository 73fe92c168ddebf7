package synth

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// writeBucket writes rows to a new bucket under a temp dir.
func writeBucket(t testing.TB, rows []trace.Request, man *trace.Manifest) string {
	t.Helper()
	return tracetest.WriteBucket(t, rows, man)
}

type sinkFunc func(trace.Request) error

func (f sinkFunc) Write(r trace.Request) error { return f(r) }
func (sinkFunc) Reject(trace.Reject) error     { return nil }

// sampleRows caches each bundled sample's rows for the test binary; the
// long checks run in parallel, hence the lock.
var (
	sampleRows   = map[string][]trace.Request{}
	sampleRowsMu sync.Mutex
)

// sampleBucket converts a bundled sample into a new bucket.
func sampleBucket(t testing.TB, name string) string {
	t.Helper()
	return writeBucket(t, sampleRowsOf(t, name), &trace.Manifest{BlockSize: trace.DefaultBlockSize})
}

// sampleRowsOf returns a bundled sample's rows, read once per test binary.
func sampleRowsOf(t testing.TB, name string) []trace.Request {
	t.Helper()
	sampleRowsMu.Lock()
	defer sampleRowsMu.Unlock()
	rows, ok := sampleRows[name]
	if !ok {
		d, found := datasets.Lookup(name)
		if !found {
			t.Fatalf("no bundled sample %q", name)
		}
		sink := sinkFunc(func(r trace.Request) error { rows = append(rows, r); return nil })
		if _, err := datasets.Read(context.Background(), d.Open(), datasets.Options{Name: d.File}, sink); err != nil {
			t.Fatal(err)
		}
		sampleRows[name] = rows
	}
	return rows
}

// wholeFits caches the fit of each whole bundled sample: two long checks
// use it, in parallel, and the Azure fit takes ~10 s.
var (
	wholeFits   = map[string]*Model{}
	wholeFitsMu sync.Mutex
)

// wholeSampleFit returns the fit (latent layer included) of a whole
// bundled sample, computed once per test binary. Callers must not change it.
func wholeSampleFit(t testing.TB, name string) *Model {
	t.Helper()
	wholeFitsMu.Lock()
	defer wholeFitsMu.Unlock()
	if m, ok := wholeFits[name]; ok {
		return m
	}
	m, err := Fit(context.Background(), sampleBucket(t, name), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wholeFits[name] = m
	return m
}

// generateBucket generates a workload from m into a new bucket.
func generateBucket(t testing.TB, m *Model, opts GenerateOptions) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gen")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{Deterministic: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(context.Background(), m, opts, w.Write); err != nil {
		t.Fatal(err)
	}
	man := &trace.Manifest{Kind: "workload", BlockSize: trace.DefaultBlockSize}
	if err := w.Close(man); err != nil {
		t.Fatal(err)
	}
	return dir
}

func timeDuration(ns float64) time.Duration { return time.Duration(ns) }
