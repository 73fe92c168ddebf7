package trace

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeBucket writes rows as a bucket into dir and fails the test on error.
func writeBucket(t *testing.T, dir string, opts WriterOptions, rows []Request) {
	t.Helper()
	w, err := NewBucketWriter(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&Manifest{Kind: "trace"}); err != nil {
		t.Fatal(err)
	}
}

// TestOutputsNeverLoseOrDeleteOutside: each row is a careless or hostile
// use of an output directory. None may lose the old output, delete a file
// outside it, or let two writers share it.
func TestOutputsNeverLoseOrDeleteOutside(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, root, out string)
	}{
		{"a failed replacement keeps the old bucket", func(t *testing.T, root, out string) {
			w, err := NewBucketWriter(out, WriterOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range sampleRequests(5) {
				w.Write(r)
			}
			w.Abort() // the command failed after writing rows
		}},
		{"the replacement starts reading only after the old one is still there", func(t *testing.T, root, out string) {
			w, err := NewBucketWriter(out, WriterOptions{Force: true, PartRows: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			for _, r := range sampleRequests(7) { // parts flushed mid-write go to the stage
				w.Write(r)
			}
			if _, _, err := ReadAll(context.Background(), out); err != nil {
				t.Fatalf("the old bucket is not readable while its replacement is written: %v", err)
			}
		}},
		{"a manifest naming files outside the bucket deletes nothing there", func(t *testing.T, root, out string) {
			m, err := ReadManifest(out)
			if err != nil {
				t.Fatal(err)
			}
			m.Parts = append(m.Parts, Part{Path: "../victim/victim.txt"}, Part{Path: "../../x"})
			if err := WriteJSONAtomic(filepath.Join(out, ManifestName), m); err != nil {
				t.Fatal(err)
			}
			w, err := NewBucketWriter(out, WriterOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			w.Write(sampleRequests(1)[0])
			if err := w.Close(&Manifest{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file the user put in the bucket is never deleted", func(t *testing.T, root, out string) {
			notes := filepath.Join(out, "notes.txt")
			os.WriteFile(notes, []byte("mine"), 0o644)
			w, err := NewBucketWriter(out, WriterOptions{Force: true})
			if err == nil {
				w.Abort()
				t.Fatal("replacing a bucket that holds a user's file was allowed")
			}
			if !strings.Contains(err.Error(), "notes.txt") {
				t.Errorf("error %q does not name the foreign file", err)
			}
			os.Remove(notes)
		}},
		{"a second writer is locked out", func(t *testing.T, root, out string) {
			w, err := NewBucketWriter(out, WriterOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if w2, err := NewBucketWriter(out, WriterOptions{Force: true}); !errors.Is(err, ErrOutputLocked) {
				if w2 != nil {
					w2.Abort()
				}
				t.Fatalf("second writer: err = %v, want ErrOutputLocked", err)
			}
		}},
		{"an output holding its own input is refused", func(t *testing.T, root, out string) {
			m, _ := ReadManifest(out)
			part := filepath.Join(out, m.Parts[0].Path)
			if _, err := NewBucketWriter(out, WriterOptions{Force: true, Inputs: []string{part}}); !errors.Is(err, ErrOutputIsInput) {
				t.Fatalf("err = %v, want ErrOutputIsInput", err)
			}
		}},
		{"an output inside its input is refused", func(t *testing.T, root, out string) {
			if _, err := NewBucketWriter(filepath.Join(out, "sub"), WriterOptions{Inputs: []string{out}}); !errors.Is(err, ErrOutputIsInput) {
				t.Fatalf("err = %v, want ErrOutputIsInput", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			out := filepath.Join(root, "b", "out")
			victim := filepath.Join(root, "b", "victim", "victim.txt")
			os.MkdirAll(filepath.Dir(victim), 0o755)
			os.WriteFile(victim, []byte("keep"), 0o644)
			x := filepath.Join(root, "x")
			os.WriteFile(x, []byte("keep"), 0o644)
			before := sampleRequests(10)
			writeBucket(t, out, WriterOptions{}, before)

			c.run(t, root, out)

			for _, p := range []string{victim, x} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s outside the output was deleted: %v", p, err)
				}
			}
			if rows, _, err := ReadAll(context.Background(), out); err != nil || len(rows) == 0 {
				t.Errorf("the output no longer reads: %d rows, %v", len(rows), err)
			}
			leftovers, _ := filepath.Glob(filepath.Join(root, "b", ".*"))
			if len(leftovers) > 0 {
				t.Errorf("staging or lock files left beside the output: %v", leftovers)
			}
		})
	}
}

// TestCheckOutputPath: the output may not be an input, lie inside one or
// hold one, also through a symbolic link.
func TestCheckOutputPath(t *testing.T) {
	root := t.TempDir()
	bucket := filepath.Join(root, "bucket")
	os.MkdirAll(filepath.Join(bucket, "date=2024-01-01"), 0o755)
	file := filepath.Join(bucket, "_manifest.json")
	os.WriteFile(file, []byte("{}"), 0o644)
	link := filepath.Join(root, "link")
	os.Symlink(bucket, link)
	for _, c := range []struct {
		out    string
		inputs []string
		bad    bool
	}{
		{bucket, []string{bucket}, true},
		{file, []string{bucket}, true},                              // fit B --out B/_manifest.json
		{filepath.Join(bucket, "new", "x"), []string{bucket}, true}, // not yet created, still inside
		{root, []string{file}, true},                                // --force would delete the input
		{filepath.Join(link, "model.json"), []string{bucket}, true},
		{filepath.Join(root, "model.json"), []string{bucket}, false},
		{filepath.Join(root, "bucket2"), []string{bucket}, false}, // a name prefix is not containment
		{filepath.Join(root, "out"), []string{"-", "azure-code-2023"}, false},
	} {
		err := CheckOutputPath(c.out, c.inputs)
		if c.bad != errors.Is(err, ErrOutputIsInput) {
			t.Errorf("CheckOutputPath(%s, %v) = %v, want refused: %v", c.out, c.inputs, err, c.bad)
		}
	}
}

// TestRequestValidateRefusesHostileValues: each row is a value a converted
// log or a hand-made bucket can carry that crashed or hung a later stage.
func TestRequestValidateRefusesHostileValues(t *testing.T) {
	ok := func() Request { return sampleRequests(1)[0] }
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		field string
		edit  func(*Request)
	}{
		{"input_tokens", func(r *Request) { r.InputTokens = 1e18 }}, // replay panicked in makeslice
		{"input_tokens", func(r *Request) { r.InputTokens = 1e9 }},  // ran out of memory
		{"output_tokens", func(r *Request) { r.OutputTokens = -1 }},
		{"max_tokens", func(r *Request) { r.MaxTokens = MaxTokens + 1 }},
		{"think_time_ms", func(r *Request) { r.ThinkTimeMs = Ptr(nan) }}, // replay waited for ever
		{"think_time_ms", func(r *Request) { r.ThinkTimeMs = Ptr(-5.0) }},
		{"cancel_after_ms", func(r *Request) { r.CancelAfterMs = Ptr(nan) }}, // cancelled at once
		{"cancel_after_ms", func(r *Request) { r.CancelAfterMs = Ptr(inf) }},
		{"cancel_after_ms", func(r *Request) { r.CancelAfterMs = Ptr(-1.0) }},
		{"read_delay_ms", func(r *Request) { r.ReadDelayMs = Ptr(1e300) }},
		{"temperature", func(r *Request) { r.Temperature = Ptr(nan) }}, // recorded as conn_error
		{"top_p", func(r *Request) { r.TopP = Ptr(1.5) }},
		{"request_id", func(r *Request) { r.RequestID = "a\x00b" }}, // an invalid header
		{"model", func(r *Request) { r.Model = "m\x1b[31m" }},       // an escape sequence
		{"phase", func(r *Request) { r.Phase = string([]byte{0xff, 0xfe}) }},
		{"ts", func(r *Request) { r.TS = math.MaxInt64 }},
		{"api", func(r *Request) { r.API = "embeddings" }},
		{"n", func(r *Request) { r.N = -3 }},
		{"cancel_after_tokens", func(r *Request) { r.CancelAfterTokens = Ptr(int64(-1)) }},
		{"prefix_blocks", func(r *Request) { r.InputTokens, r.PrefixBlocks = 1, []int64{1, 2, 3} }},
		{"parent_ids", func(r *Request) { r.ParentIDs = make([]string, MaxParents+1) }}, // a fan-in without bound
		{"parent_ids", func(r *Request) { r.ParentIDs = []string{r.RequestID} }},        // waits on itself
		{"parent_ids", func(r *Request) { r.ParentIDs = []string{"p\x00"} }},
		{"tool_ms", func(r *Request) { r.ToolMs = Ptr(nan) }},
		{"role", func(r *Request) { r.Role = "overlord" }},
	} {
		r := ok()
		c.edit(&r)
		wantFieldError(t, c.field, r.Validate())
	}
	r := ok()
	if err := r.Validate(); err != nil {
		t.Errorf("a plain request: %v", err)
	}
}

// TestResultValidateRefusesHostileAnswers: the answer fingerprints and
// probe grades a run writes (issue 40) are held to their shapes too, so
// a results file made elsewhere cannot carry text where a hash belongs.
func TestResultValidateRefusesHostileAnswers(t *testing.T) {
	ok := func() Result {
		return Result{Identity: Identity{RequestID: "r"}, Shape: Shape{API: APIChat, N: 1}, Outcome: OutcomeOK, RunID: "run",
			OutputHashes: []string{strings.Repeat("ab", 16)}, Probe: "sort", ProbeCorrect: Ptr(true)}
	}
	for _, c := range []struct {
		field string
		edit  func(*Result)
	}{
		{"output_hashes", func(r *Result) { r.OutputHashes = []string{"the answer was 42"} }},
		{"output_hashes", func(r *Result) { r.OutputHashes = []string{strings.Repeat("AB", 16)} }},
		{"output_hashes", func(r *Result) { r.OutputHashes = make([]string, MaxOutputHashes+1) }},
		{"probe", func(r *Result) { r.Probe = "so\x1b[2Jrt" }},
		{"probe_correct", func(r *Result) { r.Probe = "" }},
	} {
		r := ok()
		c.edit(&r)
		wantFieldError(t, c.field, r.Validate())
	}
	r := ok()
	if err := r.Validate(); err != nil {
		t.Errorf("a plain result: %v", err)
	}
}

// wantFieldError fails the test unless err is a FieldError on field.
func wantFieldError(t *testing.T, field string, err error) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s: Validate() = %v, want a FieldError on %s", field, err, field)
	}
}

// writeRawBucket writes rows as they are, unchecked and unsorted, into one
// part of a bucket with a matching manifest: a file a user's own tool
// could have made.
func writeRawBucket(t *testing.T, dir string, rows []Request) {
	t.Helper()
	rel := "date=2024-01-01/hour=00/part-raw-00000.parquet"
	if err := writePartFile(filepath.Join(dir, rel), rows, 100); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{SchemaVersion: SchemaVersion, Kind: "trace", Rows: int64(len(rows)), BlockSize: 512, Parts: []Part{{Path: rel, Rows: int64(len(rows))}}}
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
		t.Fatal(err)
	}
}

// TestScanRefusesFaultyParts: the bucket reader names the part and row of
// every fault instead of passing the row on.
func TestScanRefusesFaultyParts(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	req := func(ts int64, in int64) Request {
		return Request{Identity: Identity{RequestID: "r"}, TS: ts, Shape: Shape{InputTokens: in, OutputTokens: 5, API: APIChat}}
	}
	for _, c := range []struct {
		name, want string
		setup      func(t *testing.T, dir string)
	}{
		{"a value out of range", "row 2: input_tokens 1000000000000000000", func(t *testing.T, dir string) {
			writeRawBucket(t, dir, []Request{req(t0, 10), req(t0+1, 1e18)})
		}},
		{"times going backwards", "row 3: ts", func(t *testing.T, dir string) {
			writeRawBucket(t, dir, []Request{req(t0+5, 10), req(t0+6, 10), req(t0, 10)})
		}},
		{"more rows than the manifest says", "holds 2 rows, its manifest says 5", func(t *testing.T, dir string) {
			writeRawBucket(t, dir, []Request{req(t0, 10), req(t0+1, 10)})
			m, _ := ReadManifest(dir)
			m.Parts[0].Rows = 5
			WriteJSONAtomic(filepath.Join(dir, ManifestName), m)
		}},
		{"a part without the record's columns", "no ts column", func(t *testing.T, dir string) {
			type other struct {
				Name string `parquet:"name"`
			}
			rel := "date=2024-01-01/hour=00/part-raw-00000.parquet"
			if err := writePartFile(filepath.Join(dir, rel), []other{{"a"}, {"b"}}, 100); err != nil {
				t.Fatal(err)
			}
			WriteJSONAtomic(filepath.Join(dir, ManifestName), &Manifest{Kind: "trace", Rows: 2, Parts: []Part{{Path: rel, Rows: 2}}})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			_, _, err := ReadAll(context.Background(), dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "part-raw-00000.parquet") {
				t.Fatalf("ReadAll = %v, want an error naming the part and %q", err, c.want)
			}
		})
	}
}

// TestResultsReadExactlyTheListedParts: a complete run reads the parts its
// run.json lists; a copied part is refused, not counted twice.
func TestResultsReadExactlyTheListedParts(t *testing.T) {
	run := t.TempDir()
	w, err := NewResultWriter(run, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		w.Write(Result{Identity: Identity{RequestID: itoa(i)}, Outcome: OutcomeOK, RunID: "r"})
	}
	w.Flush()
	info := &RunInfo{Complete: true, Parts: w.Parts()}
	WriteJSONAtomic(filepath.Join(run, RunInfoName), info)
	if rows, err := ReadResults(run); err != nil || len(rows) != 4 {
		t.Fatalf("read %d rows, %v; want 4", len(rows), err)
	}
	b, _ := os.ReadFile(filepath.Join(run, w.Parts()[0].Path))
	os.WriteFile(filepath.Join(run, ResultsDir, "part-00000 (copy).parquet"), b, 0o644)
	if rows, err := ReadResults(run); err == nil || !strings.Contains(err.Error(), "not listed") {
		t.Fatalf("with a copied part: %d rows, %v; want an error naming it", len(rows), err)
	}
	info.Complete = false // an interrupted run lists no parts: read what is there
	WriteJSONAtomic(filepath.Join(run, RunInfoName), info)
	if rows, err := ReadResults(run); err != nil || len(rows) != 6 {
		t.Fatalf("interrupted run: %d rows, %v; want the 6 on disk", len(rows), err)
	}
}

// TestFilesAreWorldReadable: parts, manifests and rejects get 0644 less
// the umask, like any file a command creates (CreateTemp makes 0600).
func TestFilesAreWorldReadable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := NewBucketWriter(dir, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sampleRequests(3) {
		w.Write(r)
	}
	w.Reject(Reject{File: "f", Line: 1, Reason: "x"})
	if err := w.Close(&Manifest{}); err != nil {
		t.Fatal(err)
	}
	want := filePerm()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, _ := d.Info()
		switch {
		case d.IsDir() && info.Mode().Perm() != dirPerm():
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), dirPerm())
		case !d.IsDir() && info.Mode().Perm() != want:
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
}
