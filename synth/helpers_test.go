package synth

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
)

// writeBucket writes rows to a new bucket under a temp dir.
func writeBucket(t testing.TB, rows []trace.Request, man *trace.Manifest) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bucket")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if man == nil {
		man = &trace.Manifest{}
	}
	if err := w.Close(man); err != nil {
		t.Fatal(err)
	}
	return dir
}

type sinkFunc func(trace.Request) error

func (f sinkFunc) Write(r trace.Request) error { return f(r) }
func (sinkFunc) Reject(trace.Reject) error     { return nil }

var (
	sampleOnce  sync.Map
	sampleRows  = map[string][]trace.Request{}
	sampleStats = map[string]datasets.Stats{}
	sampleMu    sync.Mutex
)

// sampleBucket converts a bundled sample into a bucket (rows read once per
// test binary).
func sampleBucket(t testing.TB, name string) string {
	t.Helper()
	once, _ := sampleOnce.LoadOrStore(name, &sync.Once{})
	once.(*sync.Once).Do(func() {
		d, ok := datasets.Lookup(name)
		if !ok {
			t.Fatalf("no bundled sample %q", name)
		}
		var rows []trace.Request
		sink := sinkFunc(func(r trace.Request) error { rows = append(rows, r); return nil })
		st, err := datasets.Read(context.Background(), d.Open(), datasets.Options{Name: d.File}, sink)
		if err != nil {
			t.Fatal(err)
		}
		sampleMu.Lock()
		sampleRows[name], sampleStats[name] = rows, st
		sampleMu.Unlock()
	})
	sampleMu.Lock()
	rows := sampleRows[name]
	sampleMu.Unlock()
	return writeBucket(t, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
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
