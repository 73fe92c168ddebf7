package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/servetrace/servetrace/trace"
)

// rawBucket writes rows into a one-part bucket without any check, as a
// user's own tool could (DuckDB, pandas), and returns its directory.
func rawBucket(t *testing.T, dir string, rows []trace.Request) string {
	t.Helper()
	rel := "date=2024-01-01/hour=00/part-raw-00000.parquet"
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(filepath.Join(dir, rel), rows); err != nil {
		t.Fatal(err)
	}
	m := &trace.Manifest{SchemaVersion: trace.SchemaVersion, Kind: "workload", Rows: int64(len(rows)), BlockSize: 512, Parts: []trace.Part{{Path: rel, Rows: int64(len(rows))}}}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.ManifestName), m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// oneResultRun writes a complete run dir holding one result row, as a
// replay would, and returns it with its parts.
func oneResultRun(t *testing.T, run string, r trace.Result) (string, []trace.Part) {
	t.Helper()
	w, err := trace.NewResultWriter(run, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write(r)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := trace.WriteJSONAtomic(filepath.Join(run, trace.RunInfoName), &trace.RunInfo{RunID: r.RunID, Complete: true, Parts: w.Parts()}); err != nil {
		t.Fatal(err)
	}
	return run, w.Parts()
}

// plainRows are n valid requests a second apart.
func plainRows(n int) []trace.Request {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	rows := make([]trace.Request, n)
	for i := range rows {
		rows[i] = trace.Request{Identity: trace.Identity{RequestID: "r" + string(rune('a'+i))}, TS: t0 + int64(i)*1e6,
			Shape: trace.Shape{InputTokens: 20, OutputTokens: 4, API: trace.APICompletions, Stream: true}}
	}
	return rows
}

// snapshot returns every file under dir with its contents, to compare
// before and after a command.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			out[p] = string(b)
		}
		return nil
	})
	return out
}

// TestHostileInputsEndToEnd: each row is a careless or hostile use of a
// command. Each must exit non-zero with an error naming the fault (or
// convert with the line rejected), leave the files it was given as they
// were, and delete nothing outside --out.
func TestHostileInputsEndToEnd(t *testing.T) {
	root := t.TempDir()
	bucket := filepath.Join(root, "bucket")
	if code, _, errOut := runCLI(t, "convert", "mooncake-synthetic", "--out", bucket); code != 0 {
		t.Fatal(errOut)
	}
	m, err := trace.ReadManifest(bucket)
	if err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(bucket, m.Parts[0].Path)
	victim := writeFile(t, root, "victim.txt", []byte("keep me"))
	nan := math.NaN()
	for _, c := range []struct {
		name string
		// args builds the command line in the case's own directory.
		args func(dir string) []string
		// wantErr must appear in stderr (exit code non-zero), or in
		// stdout when wantCode is 0.
		want     string
		wantCode int
	}{
		{"force with a failing input keeps the old bucket", func(dir string) []string {
			bad := writeFile(t, dir, "bad.csv", []byte("TIMESTAMP,ContextTokens,GeneratedTokens\nnot-a-time,x,y\nalso-bad,1,2\n"))
			return []string{"convert", bad, "--out", bucket, "--force"}
		}, "no rows converted", 1},
		{"force over its own input is refused", func(dir string) []string {
			return []string{"convert", part, "--format", "mooncake", "--out", bucket, "--force"}
		}, "holds the input", 1},
		{"a manifest naming a file outside deletes nothing there", func(dir string) []string {
			evil := filepath.Join(dir, "evil")
			if code, _, errOut := runCLI(t, "convert", "mooncake-synthetic", "--out", evil); code != 0 {
				t.Fatal(errOut)
			}
			em, _ := trace.ReadManifest(evil)
			rel, _ := filepath.Rel(evil, victim)
			em.Parts = append(em.Parts, trace.Part{Path: rel})
			trace.WriteJSONAtomic(filepath.Join(evil, trace.ManifestName), em)
			return []string{"convert", "mooncake-synthetic", "--out", evil, "--force"}
		}, "converted", 0},
		{"analyze --html over the run's own run.json is refused", func(dir string) []string {
			run, _ := oneResultRun(t, filepath.Join(dir, "run"), trace.Result{Identity: trace.Identity{RequestID: "a"}, Outcome: trace.OutcomeOK, RunID: "x"})
			return []string{"analyze", run, "--html", filepath.Join(run, trace.RunInfoName)}
		}, "lies inside the input", 2},
		{"fit --out over the bucket's own manifest is refused", func(dir string) []string {
			return []string{"fit", bucket, "--out", filepath.Join(bucket, trace.ManifestName)}
		}, "lies inside the input", 2},
		{"replay --out inside its workload is refused", func(dir string) []string {
			wl := rawBucket(t, filepath.Join(dir, "wl"), plainRows(3))
			return []string{"replay", wl, "--target", "http://127.0.0.1:1", "--out", filepath.Join(wl, "run")}
		}, "lies inside the input", 1},
		{"a second replay into a run dir being written is locked out", func(dir string) []string {
			run := filepath.Join(dir, "run")
			w, err := trace.NewResultWriter(run, 10) // a replay in progress
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			return []string{"replay", rawBucket(t, filepath.Join(dir, "wl"), plainRows(3)), "--target", startFastSim(t, nil), "--out", run}
		}, "another servetrace process is writing this output", 1},
		{"a 10^18-token request is rejected by convert", func(dir string) []string {
			lines := []string{"TIMESTAMP,ContextTokens,GeneratedTokens"}
			for i := range 200 {
				lines = append(lines, "2023-11-16 18:15:46."+fmt.Sprintf("%07d", i)+",100,5")
			}
			lines = append(lines, "2023-11-16 18:15:47.0000000,1000000000000000000,5")
			in := writeFile(t, dir, "azure.csv", []byte(strings.Join(lines, "\n")+"\n"))
			return []string{"convert", in, "--out", filepath.Join(dir, "out")}
		}, "rejected by reason: 1 × input_tokens N: must be N to N", 0},
		{"a hand-made workload with a 10^18-token prompt is refused by replay", func(dir string) []string {
			rows := plainRows(3)
			rows[1].InputTokens = 1e18
			return []string{"replay", rawBucket(t, filepath.Join(dir, "wl"), rows), "--target", "http://127.0.0.1:1", "--out", filepath.Join(dir, "run")}
		}, "row 2: input_tokens 1000000000000000000", 1},
		{"and by export", func(dir string) []string {
			rows := plainRows(3)
			rows[1].InputTokens = 1e18
			return []string{"export", rawBucket(t, filepath.Join(dir, "wl"), rows), "--format", "vllm-custom", "--out", filepath.Join(dir, "x.jsonl")}
		}, "row 2: input_tokens", 1},
		{"a NaN think time is refused before anything is sent", func(dir string) []string {
			rows := plainRows(3)
			rows[2].ThinkTimeMs = &nan
			return []string{"replay", rawBucket(t, filepath.Join(dir, "wl"), rows), "--target", "http://127.0.0.1:1", "--out", filepath.Join(dir, "run")}
		}, "row 3: think_time_ms NaN", 1},
		{"a NUL in a request id is refused", func(dir string) []string {
			rows := plainRows(3)
			rows[0].RequestID = "a\x00b"
			return []string{"replay", rawBucket(t, filepath.Join(dir, "wl"), rows), "--target", "http://127.0.0.1:1", "--out", filepath.Join(dir, "run")}
		}, "row 1: request_id", 1},
		{"times going backwards inside a part are refused", func(dir string) []string {
			rows := plainRows(3)
			rows[0].TS, rows[2].TS = rows[2].TS, rows[0].TS
			return []string{"replay", rawBucket(t, filepath.Join(dir, "wl"), rows), "--target", "http://127.0.0.1:1", "--out", filepath.Join(dir, "run")}
		}, "is before the row above it", 1},
		{"a part without the schema's columns is refused", func(dir string) []string {
			wl := filepath.Join(dir, "wl")
			rel := "date=2024-01-01/hour=00/part-raw-00000.parquet"
			os.MkdirAll(filepath.Join(wl, filepath.Dir(rel)), 0o755)
			type other struct {
				Name string `parquet:"name"`
			}
			parquet.WriteFile(filepath.Join(wl, rel), []other{{"a"}, {"b"}})
			trace.WriteJSONAtomic(filepath.Join(wl, trace.ManifestName), &trace.Manifest{Kind: "workload", Rows: 1102, Parts: []trace.Part{{Path: rel, Rows: 1102}}})
			return []string{"export", wl, "--format", "azure"}
		}, "no ts column", 1},
		{"a duplicated results part is refused, not counted twice", func(dir string) []string {
			run, parts := oneResultRun(t, filepath.Join(dir, "run"), trace.Result{Identity: trace.Identity{RequestID: "a"}, Outcome: trace.OutcomeOK, RunID: "x"})
			b, _ := os.ReadFile(filepath.Join(run, parts[0].Path))
			os.WriteFile(filepath.Join(run, trace.ResultsDir, "part-00000-copy.parquet"), b, 0o644)
			return []string{"analyze", run}
		}, "is not listed in run.json", 1},
		{"escape sequences in a model name do not reach the terminal", func(dir string) []string {
			run, _ := oneResultRun(t, filepath.Join(dir, "run"), trace.Result{Identity: trace.Identity{RequestID: "a", Model: "evil\x1b[2J\x1b[31m"}, Outcome: trace.OutcomeOK, RunID: "x"})
			return []string{"analyze", run, "--by", "model"}
		}, `evil\x1b[2J\x1b[31m`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := c.args(dir)
			before := snapshot(t, bucket)
			code, out, errOut := runCLI(t, args...)
			if code != c.wantCode {
				t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, c.wantCode, out, errOut)
			}
			text := errOut
			if c.wantCode == 0 {
				text = out
			}
			if !strings.Contains(text, c.want) {
				t.Errorf("%v: output lacks %q:\nstdout: %s\nstderr: %s", args, c.want, out, errOut)
			}
			if strings.ContainsRune(out+errOut, 0x1b) {
				t.Errorf("a raw escape character reached the terminal")
			}
			after := snapshot(t, bucket)
			if len(after) != len(before) {
				t.Errorf("the bucket changed: %d files before, %d after", len(before), len(after))
			}
			for p, b := range before {
				if after[p] != b {
					t.Errorf("%s changed or disappeared", p)
				}
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
				t.Errorf("a file outside --out was deleted or changed: %v", err)
			}
			if _, _, err := trace.ReadAll(context.Background(), bucket); err != nil {
				t.Errorf("the bucket no longer reads: %v", err)
			}
		})
	}
}
