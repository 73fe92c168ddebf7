package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// runCLI runs servetrace in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"servetrace"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// startFastSim serves a simulator with 1 ms iterations for CLI tests.
func startFastSim(t *testing.T, mod func(*sim.Options)) string {
	t.Helper()
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{IterBase: time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	return startSim(t, o).URL
}

// startSim serves a simulator in this process until the test ends.
func startSim(t *testing.T, o sim.Options) *sim.Running {
	t.Helper()
	s, err := sim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// fittedModels caches, per bundled dataset, the model its CLI convert and
// fit give, so each test that needs a workload pays only for generate: the
// fit takes ten seconds under -race, and eight tests need one. The files
// live under modelCacheDir, which TestMain removes.
var fittedModels = struct {
	sync.Mutex
	path map[string]string
}{path: map[string]string{}}

var modelCacheDir string

// fittedModel returns the path of the cached model of dataset, converting
// and fitting it through the CLI the first time. The fit skips the
// latent-rate layer: its simulations take a minute under -race, and these
// tests are about the pipeline, not the arrival model
// (TestLongPipelineThroughTheCLI and the synth package fit it).
func fittedModel(t *testing.T, dataset string) string {
	t.Helper()
	fittedModels.Lock()
	defer fittedModels.Unlock()
	if p, ok := fittedModels.path[dataset]; ok {
		return p
	}
	if modelCacheDir == "" {
		t.Fatal("modelCacheDir is unset: TestMain did not run")
	}
	dir := filepath.Join(modelCacheDir, dataset)
	model := filepath.Join(dir, "m.json")
	for _, step := range [][]string{
		{"convert", dataset, "--out", filepath.Join(dir, "trace")},
		{"fit", filepath.Join(dir, "trace"), "--no-latent", "--out", model},
	} {
		if code, _, errOut := runCLI(t, step...); code != 0 {
			t.Fatalf("%v: %s", step, errOut)
		}
	}
	fittedModels.path[dataset] = model
	return model
}

// workloadViaCLI generates duration of workload from the fitted model of a
// bundled dataset through the CLI, into dir/wl, with the model copied to
// dir/m.json; it returns the workload directory.
func workloadViaCLI(t *testing.T, dir, dataset, duration string) string {
	t.Helper()
	data, err := os.ReadFile(fittedModel(t, dataset))
	if err != nil {
		t.Fatal(err)
	}
	model := writeFile(t, dir, "m.json", data)
	wl := filepath.Join(dir, "wl")
	if code, _, errOut := runCLI(t, "generate", model, "--duration", duration, "--out", wl); code != 0 {
		t.Fatalf("generate %s: %s", model, errOut)
	}
	return wl
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// parquetFiles lists the .parquet files under dir.
func parquetFiles(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestBadInputGivesOneLineErrorAndNoParquet(t *testing.T) {
	dir := t.TempDir()
	binary := writeFile(t, dir, "binary.bin", []byte{0x00, 0x01, 0xff, 0xfe, 0x00, 0x7f})
	empty := writeFile(t, dir, "empty.csv", nil)
	people := writeFile(t, dir, "people.csv", []byte("name,age\nbob,3\n"))
	allBad := writeFile(t, dir, "allbad.csv", []byte("TIMESTAMP,ContextTokens,GeneratedTokens\nx,y,z\n,,\n"))
	truncated := writeFile(t, dir, "trunc.jsonl", []byte(`{"timestamp": 0, "input_len`))
	notModel := writeFile(t, dir, "model.json", []byte(`{"hello": 1}`))
	// A real workload, for the replay case.
	wl := workloadViaCLI(t, dir, "azure-code-2023", "5s")

	cases := []struct {
		name string
		args []string
		want []string // substrings of the error line
		out  string   // directory that must hold no Parquet afterwards
	}{
		{"missing file", []string{"convert", filepath.Join(dir, "nope.csv"), "--out", filepath.Join(dir, "o1")}, []string{"nope.csv", "no such file", "datasets list"}, "o1"},
		{"binary input", []string{"convert", binary, "--out", filepath.Join(dir, "o2")}, []string{"binary.bin", "binary"}, "o2"},
		{"empty input", []string{"convert", empty, "--out", filepath.Join(dir, "o3")}, []string{"empty.csv", "empty"}, "o3"},
		{"wrong format", []string{"convert", people, "--out", filepath.Join(dir, "o4")}, []string{"people.csv line 1", "--format"}, "o4"},
		{"every line corrupt", []string{"convert", allBad, "--out", filepath.Join(dir, "o5")}, []string{"no rows converted", "2 lines rejected"}, "o5"},
		{"truncated JSON line", []string{"convert", truncated, "--out", filepath.Join(dir, "o6")}, []string{"trunc.jsonl line 1", "does not parse"}, "o6"},
		{"forced wrong format", []string{"convert", "azure-code-2023", "--format", "mooncake", "--out", filepath.Join(dir, "o7")}, []string{"no rows converted"}, "o7"},
		{"unknown --format", []string{"convert", people, "--format", "parquet", "--out", filepath.Join(dir, "o8")}, []string{"--format", "azure, mooncake"}, "o8"},
		{"missing --out", []string{"convert", people}, []string{"out"}, ""},
		{"fit a non-bucket", []string{"fit", dir, "--out", filepath.Join(dir, "m2.json")}, []string{"not a servetrace trace directory"}, ""},
		{"generate from a non-model", []string{"generate", notModel, "--out", filepath.Join(dir, "o9")}, []string{"model.json", "servetrace fit"}, "o9"},
		{"unreachable endpoint", []string{"replay", wl, "--target", "http://127.0.0.1:1", "--out", filepath.Join(dir, "r1")}, []string{"cannot reach endpoint http://127.0.0.1:1", "servetrace sim"}, "r1"},
		{"bad target URL", []string{"replay", wl, "--target", "localhost:8000", "--out", filepath.Join(dir, "r2")}, []string{"--target", "http://"}, "r2"},
		{"analyze a non-run", []string{"analyze", dir}, []string{"not a servetrace run directory"}, ""},
		{"calibrate a non-run", []string{"sim", "calibrate", dir}, []string{"not a servetrace run directory"}, ""},
		{"unknown sim preset", []string{"sim", "--preset", "h200-dreams"}, []string{"--preset", "llama-3.1-8b-h100"}, ""},
		{"bad percentiles", []string{"analyze", dir, "--percentiles", "50,abc"}, []string{"--percentiles", "abc"}, ""},
		{"no arguments", []string{"fit", "--out", "x.json"}, []string{"missing BUCKET"}, ""},
		{"unknown flag", []string{"analyze", "--frobnicate"}, []string{"frobnicate"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, c.args...)
			if code == 0 {
				t.Fatalf("exit 0; want non-zero")
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "servetrace: ") || strings.Contains(errOut, "goroutine ") || strings.Contains(errOut, "panic") {
				t.Fatalf("stderr is not a one-line servetrace error:\n%s", errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q lacks %q", last, w)
				}
			}
			if c.out != "" {
				out := filepath.Join(dir, c.out)
				if files := parquetFiles(out); len(files) > 0 {
					t.Errorf("left Parquet behind: %v", files)
				}
				if _, err := os.Stat(filepath.Join(out, trace.ManifestName)); err == nil {
					t.Error("left a manifest behind")
				}
			}
		})
	}
}

func TestConvertSamplesRowCountsAndPrefixBlocks(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := runCLI(t, "convert", "azure-code-2023", "--out", filepath.Join(dir, "azure")); code != 0 || !strings.Contains(out, "converted 8819 rows (0 rejected)") {
		t.Fatalf("azure: exit %d\n%s%s", code, out, errOut)
	}
	rows, m, err := trace.ReadAll(context.Background(), filepath.Join(dir, "azure"))
	if err != nil || len(rows) != 8819 || m.Rows != 8819 || m.Sources[0].SHA256 == "" || m.Sources[0].Citation == "" {
		t.Fatalf("azure bucket: %d rows, manifest %+v, %v", len(rows), m, err)
	}

	if code, _, errOut := runCLI(t, "convert", "mooncake-synthetic", "--out", filepath.Join(dir, "mc")); code != 0 {
		t.Fatal(errOut)
	}
	rows, m, err = trace.ReadAll(context.Background(), filepath.Join(dir, "mc"))
	if err != nil || len(rows) != 3993 || !m.TimesRelative || m.BlockSize != 512 || m.PrefixIDs != trace.PrefixIDsSource {
		t.Fatalf("mooncake bucket: %d rows, manifest %+v, %v", len(rows), m, err)
	}
	// Same sharing structure: rows read back in ts order equal the source's
	// rows (stable for equal timestamps), block for block.
	var src struct{ rows []trace.Request }
	d, _ := datasets.Lookup("mooncake-synthetic")
	if _, err := datasets.Read(context.Background(), d.Open(), datasets.Options{Name: "x"}, sinkTo(&src.rows)); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if int64(len(rows[i].PrefixBlocks)) != (rows[i].InputTokens+511)/512 || !slices.Equal(rows[i].PrefixBlocks, src.rows[i].PrefixBlocks) {
			t.Fatalf("row %d: prefix blocks changed in the bucket", i)
		}
	}
	// Re-converting into the same place needs --force.
	if code, _, errOut := runCLI(t, "convert", "mooncake-synthetic", "--out", filepath.Join(dir, "mc")); code == 0 || !strings.Contains(errOut, "--force") {
		t.Fatalf("second convert: exit %d, %s", code, errOut)
	}
}

// TestLongPipelineThroughTheCLI runs convert, fit, generate, replay and
// analyze on the Mooncake sample. Its prompts average 15k tokens, which the
// simulator tokenizes: under -race that alone takes 20 s, so it runs
// without -race in make test-timing; replay's races are checked by the
// replay package's own tests.
func TestLongPipelineThroughTheCLI(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	dir := t.TempDir()
	o := sim.DefaultOptions()
	o.Engine.Cost, o.FailRate, o.Seed = sim.CostModel{IterBase: time.Millisecond}, 0.1, 5
	s, err := sim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	steps := [][]string{
		{"convert", "mooncake-synthetic", "--out", filepath.Join(dir, "trace")},
		{"fit", filepath.Join(dir, "trace"), "--out", filepath.Join(dir, "model.json")},
		{"generate", filepath.Join(dir, "model.json"), "--duration", "20s", "--seed", "3", "--out", filepath.Join(dir, "wl")},
		{"replay", filepath.Join(dir, "wl"), "--target", rs.URL, "--speed", "20", "--out", filepath.Join(dir, "run")},
	}
	for _, s := range steps {
		if code, out, errOut := runCLI(t, s...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", s, code, out, errOut)
		}
	}
	code, out, errOut := runCLI(t, "analyze", filepath.Join(dir, "run"), "--json", "--percentiles", "50,99")
	if code != 0 {
		t.Fatal(errOut)
	}
	var rep analyze.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("analyze --json is not JSON: %v", err)
	}
	wl, _, _ := trace.ReadAll(context.Background(), filepath.Join(dir, "wl"))
	if rep.Requests.Counted != len(wl) || rep.Requests.Outcomes[trace.OutcomeOK]+rep.Requests.Outcomes[trace.OutcomeHTTPError] != len(wl) {
		t.Errorf("report counts %+v for %d workload requests", rep.Requests, len(wl))
	}
	if rep.Requests.Outcomes[trace.OutcomeHTTPError] == 0 {
		t.Error("the simulator's injected failures were not recorded as http_error")
	}
	if d := rep.Metrics["ttft_ms"]; d.N != rep.Requests.Outcomes[trace.OutcomeOK] || len(d.Quantiles) != 2 {
		t.Errorf("ttft %+v", d)
	}
	code, out, _ = runCLI(t, "analyze", filepath.Join(dir, "run"))
	if code != 0 || !strings.Contains(out, "ttft") || !strings.Contains(out, "p99") {
		t.Errorf("table output:\n%s", out)
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, cmd := range []string{"convert", "fit", "generate", "replay", "sim", "analyze", "demo"} {
		code, out, _ := runCLI(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "Example") || !strings.Contains(out, "servetrace "+cmd) {
			t.Errorf("%s --help lacks an example:\n%s", cmd, out)
		}
	}
	code, out, _ := runCLI(t, "datasets", "list")
	if code != 0 || !strings.Contains(out, "azure-code-2023") || !strings.Contains(out, "8819") || !strings.Contains(out, "Splitwise") {
		t.Errorf("datasets list:\n%s", out)
	}
}

type sliceSink struct{ rows *[]trace.Request }

func sinkTo(rows *[]trace.Request) sliceSink    { return sliceSink{rows} }
func (s sliceSink) Write(r trace.Request) error { *s.rows = append(*s.rows, r); return nil }
func (sliceSink) Reject(trace.Reject) error     { return nil }

func TestHoistFlags(t *testing.T) {
	app := newApp(nil, nil)
	cases := []struct{ in, want string }{
		{"servetrace convert a.csv --out o --force", "servetrace convert --out o --force -- a.csv"},
		{"servetrace convert --out o a.csv b.csv", "servetrace convert --out o -- a.csv b.csv"},
		{"servetrace convert - --out=o", "servetrace convert --out=o -- -"},                                               // "-" is stdin, a positional
		{"servetrace analyze r1 --json r2 --percentiles 50,99", "servetrace analyze --json --percentiles 50,99 -- r1 r2"}, // bool takes no value
		{"servetrace convert a -- --weird-name", "servetrace convert -- a --weird-name"},
		{"servetrace datasets list", "servetrace datasets list"},
		{"servetrace nosuch x --y", "servetrace nosuch x --y"},
	}
	for _, c := range cases {
		got := strings.Join(hoistFlags(app, strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("hoistFlags(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestInterruptedReplayExitsNonZeroAndStaysAnalyzable(t *testing.T) {
	dir := t.TempDir()
	target := startFastSim(t, nil)
	wl := workloadViaCLI(t, dir, "azure-code-2023", "30s")
	// Cancelling the context is what SIGINT does through signal.NotifyContext;
	// it comes once the replay has written run.json and closed a results
	// part, however long its setup took.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	exited, finished := make(chan error, 1), make(chan struct{})
	var code int
	go func() {
		defer close(finished)
		code = run(ctx, []string{"servetrace", "replay", wl, "--target", target, "--out", filepath.Join(dir, "run"), "--rotate-every", "200ms"}, &stdout, &stderr)
		exited <- fmt.Errorf("exit %d", code)
	}()
	err := waitForRunDir(filepath.Join(dir, "run"), exited, 60*time.Second)
	cancel()
	<-finished
	if err != nil {
		t.Fatalf("%v; stderr:\n%s", err, stderr.String())
	}
	if code != 130 || !strings.Contains(stderr.String(), "replay incomplete") {
		t.Fatalf("exit %d, stderr %q; want 130 and a note that the replay is incomplete", code, stderr.String())
	}
	code, out, errOut := runCLI(t, "analyze", filepath.Join(dir, "run"))
	if code != 0 || !strings.Contains(out, "PARTIAL") || !strings.Contains(out, "not_sent") {
		t.Fatalf("analyze of the partial run: exit %d\n%s%s", code, out, errOut)
	}
}

func TestSecretsNeverReachTheRunDir(t *testing.T) {
	dir := t.TempDir()
	target := startFastSim(t, nil)
	wl := workloadViaCLI(t, dir, "azure-code-2023", "5s")
	const key, secret = "sk-test-KEY-8f3a", "hdr-SECRET-19c2"
	t.Setenv("MY_KEY", key)
	code, _, errOut := runCLI(t, "replay", wl, "--target", target, "--speed", "50",
		"--api-key-env", "MY_KEY", "--header", "X-Tenant-Token="+secret, "--out", filepath.Join(dir, "run"))
	if code != 0 {
		t.Fatal(errOut)
	}
	filepath.WalkDir(filepath.Join(dir, "run"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(key)) || bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s contains a secret", p)
		}
		return nil
	})
	if code, _, errOut := runCLI(t, "replay", wl, "--api-key-env", "NOT_SET_ANYWHERE", "--out", filepath.Join(dir, "r2")); code == 0 || !strings.Contains(errOut, "NOT_SET_ANYWHERE") {
		t.Errorf("unset key variable: exit %d, %s", code, errOut)
	}
}

// TestLongMooncakePromptsHaveExactTokenCounts materializes prompts for a spread
// of the bundled Mooncake rows as replay does and counts them with the
// tokenizer; rows that share their first block id share its text.
func TestLongMooncakePromptsHaveExactTokenCounts(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	var rows []trace.Request
	d, _ := datasets.Lookup("mooncake-synthetic")
	if _, err := datasets.Read(context.Background(), d.Open(), datasets.Options{Name: "mc"}, sinkTo(&rows)); err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenize.Get(tokenize.CL100K)
	pb, err := tokenize.NewPromptBuilder(tok, datasets.MooncakeBlockSize)
	if err != nil {
		t.Fatal(err)
	}
	step := 80
	// A spread of rows, plus the first two rows of up to 20 first-block ids
	// the trace shares, so the sharing check has pairs to compare.
	var pick []int
	for i := 0; i < len(rows); i += step {
		pick = append(pick, i)
	}
	byFirst := map[int64][]int{}
	for i, q := range rows {
		if len(q.PrefixBlocks) > 0 && q.InputTokens >= datasets.MooncakeBlockSize {
			byFirst[q.PrefixBlocks[0]] = append(byFirst[q.PrefixBlocks[0]], i)
		}
	}
	shared := 0
	for i, q := range rows {
		if len(q.PrefixBlocks) == 0 || shared == 20 {
			continue
		}
		if idx := byFirst[q.PrefixBlocks[0]]; len(idx) >= 2 && idx[0] == i {
			pick = append(pick, idx[0], idx[1])
			shared++
		}
	}
	firstBlockText := map[int64]string{}
	compared := 0
	for _, i := range pick {
		q := rows[i]
		text := pb.Build(int(q.InputTokens), q.PrefixBlocks, tokenize.SeedFor(q.RequestID))
		if got := tok.Count(text); int64(got) != q.InputTokens {
			t.Errorf("row %d: prompt has %d tokens, want %d", i, got, q.InputTokens)
		}
		if len(q.PrefixBlocks) > 0 && q.InputTokens >= datasets.MooncakeBlockSize {
			head := strings.Join(strings.Fields(text)[:datasets.MooncakeBlockSize], " ")
			if prev, ok := firstBlockText[q.PrefixBlocks[0]]; ok {
				compared++
				if prev != head {
					t.Errorf("row %d: first block %d has different text than an earlier row with the same id", i, q.PrefixBlocks[0])
				}
			}
			firstBlockText[q.PrefixBlocks[0]] = head
		}
	}
	if shared < 10 || compared < shared {
		t.Errorf("only %d shared first blocks compared; the check needs pairs", compared)
	}
	checked := len(pick)
	t.Logf("checked %d prompts, %d first-block ids shared", checked, shared)
}

// TestEveryFlagIsRead fails when a command defines a flag its code never
// reads: such a flag is accepted and silently ignored.
func TestEveryFlagIsRead(t *testing.T) {
	var src []byte
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	app := newApp(nil, nil)
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			for _, f := range cmd.Flags {
				name := f.Names()[0]
				if name == "help" {
					continue
				}
				// Read as c.String("name"), a helper such as setInt("name", &x),
				// or startTime(c) for --start.
				read := bytes.Contains(src, []byte(`("`+name+`")`)) || bytes.Contains(src, []byte(`("`+name+`",`))
				if !read && !(name == "start" && bytes.Contains(src, []byte(`c.Timestamp("start")`))) {
					t.Errorf("%s --%s is defined but never read", cmd.Name, name)
				}
			}
			walk(cmd.Subcommands)
		}
	}
	walk(app.Commands)
}

func TestReplayFlagsReachTheServer(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var protos []int
	var bodies []map[string]any
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		protos, bodies = append(protos, r.ProtoMajor), append(bodies, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	wl := workloadViaCLI(t, dir, "azure-code-2023", "3s")
	if code, _, errOut := runCLI(t, "replay", wl, "--target", "http://"+ln.Addr().String(), "--http", "2", "--force-output-len",
		"--model", "mapped", "--speed", "10", "--out", filepath.Join(dir, "run")); code != 0 {
		t.Fatal(errOut)
	}
	if len(bodies) == 0 {
		t.Fatal("no request reached the server")
	}
	for i, b := range bodies {
		if protos[i] != 2 || b["ignore_eos"] != true || b["min_tokens"] != b["max_tokens"] || b["model"] != "mapped" {
			t.Fatalf("request %d: HTTP/%d, ignore_eos %v, min_tokens %v, max_tokens %v, model %v", i, protos[i], b["ignore_eos"], b["min_tokens"], b["max_tokens"], b["model"])
		}
	}
}
