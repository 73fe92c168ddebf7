package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
)

// TestConvertShardsAndMerge splits the bundled Azure sample into three
// files, converts them as two shards into one directory, merges the shard
// manifests, and checks the bucket holds every row once.
func TestConvertShardsAndMerge(t *testing.T) {
	d, _ := datasets.Lookup("azure-code-2023")
	lines := strings.Split(strings.ReplaceAll(string(d.Bytes()), "\r\n", "\n"), "\n")
	header, body := lines[0], lines[1:]
	dir := t.TempDir()
	var files []string
	for i := range 3 {
		part := body[i*len(body)/3 : (i+1)*len(body)/3]
		f := filepath.Join(dir, "in"+string(rune('a'+i))+".csv")
		if err := os.WriteFile(f, []byte(header+"\n"+strings.Join(part, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	out := filepath.Join(dir, "bucket")
	for _, sh := range []string{"0/2", "1/2"} {
		if code, _, errOut := runCLI(t, append([]string{"convert", "--shard", sh, "--out", out}, files...)...); code != 0 {
			t.Fatalf("shard %s: %s", sh, errOut)
		}
		if sh == "0/2" {
			// Before every shard is in, the bucket is not readable and says why.
			if _, err := trace.OpenBucket(out); !errors.Is(err, trace.ErrShardsNotMerged) {
				t.Errorf("a half-converted bucket opened: %v", err)
			}
			if code, _, errOut := runCLI(t, "convert", "--merge-shards", "--out", out); code == 0 || !strings.Contains(errOut, "shards [1] of 2 have not finished") {
				t.Errorf("merge with a shard missing: code %d, %q", code, errOut)
			}
		}
	}
	if code, stdout, errOut := runCLI(t, "convert", "--merge-shards", "--out", out); code != 0 || !strings.Contains(stdout, "8819 rows") {
		t.Fatalf("merge: code %d, %q %q", code, stdout, errOut)
	}
	rows, m, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 8819 || len(m.Sources) != 3 {
		t.Fatalf("%d rows from %d sources, want 8819 from 3", len(rows), len(m.Sources))
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].TS < rows[i-1].TS {
			t.Fatal("the merged bucket does not read in time order")
		}
	}
	if shards, _ := filepath.Glob(filepath.Join(out, "_manifest.shard-*")); len(shards) != 0 {
		t.Errorf("shard manifests left after the merge: %v", shards)
	}
}
