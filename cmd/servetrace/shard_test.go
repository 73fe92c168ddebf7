package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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

// TestLongFitShardsAndMerge fits the bundled Azure sample whole and as three
// shards (partial files merged by 'fit --merge'): without sessions or
// prefixes every law merges exactly, so the two models are the same but
// for the time they were made. A merge missing a shard, and flags that do
// not go together, are refused naming what to do.
func TestLongFitShardsAndMerge(t *testing.T) {
	if raceEnabled {
		t.Skip("five fits through the CLI: run without -race by make test-timing")
	}
	dir := t.TempDir()
	bucket := filepath.Join(dir, "trace")
	if code, _, errOut := runCLI(t, "convert", "azure-code-2023", "--out", bucket); code != 0 {
		t.Fatal(errOut)
	}
	whole := filepath.Join(dir, "whole.json")
	if code, _, errOut := runCLI(t, "fit", bucket, "--no-latent", "--out", whole); code != 0 {
		t.Fatal(errOut)
	}
	var parts []string
	for i := range 3 {
		part := filepath.Join(dir, fmt.Sprintf("part-%d.fitpart.gz", i))
		code, stdout, errOut := runCLI(t, "fit", bucket, "--shard", fmt.Sprintf("%d/3", i), "--out", part)
		if code != 0 || !strings.Contains(stdout, fmt.Sprintf("fitted shard %d/3", i)) {
			t.Fatalf("shard %d: code %d, %q %q", i, code, stdout, errOut)
		}
		parts = append(parts, part)
	}
	merged := filepath.Join(dir, "merged.json")
	if code, _, errOut := runCLI(t, append([]string{"fit", "--merge", "--no-latent", "--out", merged}, parts[2], parts[0], parts[1])...); code != 0 {
		t.Fatal(errOut)
	}
	a, b := readModelJSON(t, whole), readModelJSON(t, merged)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the merged model differs from the whole fit's")
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a shard missing", []string{"fit", "--merge", "--out", filepath.Join(dir, "m.json"), parts[0], parts[2]}, exitFailure, "--shard I/N"},
		{"no partials", []string{"fit", "--merge", "--out", filepath.Join(dir, "m.json")}, exitUsage, "missing PARTIAL"},
		{"a span with --merge", []string{"fit", "--merge", "--span", "0-50", "--out", filepath.Join(dir, "m.json"), parts[0]}, exitUsage, "--span"},
		{"--no-latent with --shard", []string{"fit", bucket, "--shard", "0/3", "--no-latent", "--out", filepath.Join(dir, "p.gz")}, exitUsage, "fit --merge"},
		{"a shard out of range", []string{"fit", bucket, "--shard", "3/3", "--out", filepath.Join(dir, "p.gz")}, exitUsage, "--shard"},
		{"a partial as its own output", []string{"fit", "--merge", "--out", parts[0], parts[0], parts[1], parts[2]}, exitUsage, "--out"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("code %d, %q; want code %d saying %q", code, errOut, c.code, c.want)
			}
		})
	}
}

// readModelJSON decodes a model file as plain JSON, without the time it was
// fitted (created_at).
func readModelJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "created_at")
	return m
}
