// Package tracetest helps tests write the records other packages read.
package tracetest

import (
	"path/filepath"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// WriteBucket writes rows to a new bucket under a temp dir, closed with
// man (nil: an empty manifest), and returns its directory.
func WriteBucket(t testing.TB, rows []trace.Request, man *trace.Manifest) string {
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

// WriteWorkload is WriteBucket for a workload.
func WriteWorkload(t testing.TB, rows []trace.Request) string {
	t.Helper()
	return WriteBucket(t, rows, &trace.Manifest{Kind: "workload"})
}
