package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/regfile"
)

// RunInfoName is the run manifest's file name inside a run directory.
const RunInfoName = "run.json"

// ResultsDir is the folder of result parts inside a run directory.
const ResultsDir = "results"

// LatenessSummary describes how late the client sent requests relative to
// when they were admitted (sent_ns − admitted_ns), in milliseconds.
type LatenessSummary struct {
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// RunInfo is run.json: what a replay did, against what, and how faithfully.
type RunInfo struct {
	SchemaVersion int    `json:"schema_version"`
	ToolVersion   string `json:"tool_version"`
	RunID         string `json:"run_id"`
	Shard         int32  `json:"shard"`
	// ShardCount is how many shards split the run (0 or 1: none).
	ShardCount int32 `json:"shard_count,omitempty"`
	// StartUnixNs is the wall-clock time of the run's monotonic zero.
	StartUnixNs int64     `json:"start_unix_ns"`
	EndUnixNs   int64     `json:"end_unix_ns"`
	Target      string    `json:"target"`
	Workload    string    `json:"workload"`
	Options     any       `json:"options"`
	Scheduled   int64     `json:"scheduled"`
	Outcomes    OutcomeCt `json:"outcomes"`
	// Complete is false when the run was interrupted or failed before every
	// scheduled request had a result.
	Complete bool   `json:"complete"`
	Reason   string `json:"reason,omitempty"`

	Lateness LatenessSummary `json:"lateness"`
	// Spans says what the run's span receiver (--collect-spans) took and
	// dropped; absent when it ran none.
	Spans *SpanCounts `json:"spans,omitempty"`
	// ClientFloor is the latency this client adds to a TTFT on an idle
	// machine, measured before the run (once per process and protocol)
	// against a loopback server in the same process; absent where it
	// could not be measured.
	ClientFloor *ClientFloor `json:"client_floor,omitempty"`
	// LatenessToWire is wrote − admitted: lateness up to the moment the
	// transport wrote the request to its connection, which includes the
	// transport's own work and, on a new connection, the dial. Absent in
	// runs recorded before it.
	LatenessToWire *LatenessSummary `json:"lateness_to_wire,omitempty"`
	// OfferedRate and AchievedRate are requests per second the schedule
	// asked for and the client actually sent.
	OfferedRate  float64 `json:"offered_rate_rps"`
	AchievedRate float64 `json:"achieved_rate_rps"`
	// ClientSaturated is true when lateness p99 exceeded MaxLatenessMs: the
	// client, not the server, may explain the latencies.
	ClientSaturated bool    `json:"client_saturated"`
	MaxLatenessMs   float64 `json:"max_lateness_ms"`
	Parts           []Part  `json:"parts"`

	// Provenance. A field that could not be recorded holds NotRecorded.
	ToolCommit  string            `json:"tool_commit"`
	GoVersion   string            `json:"go_version"`
	HostCPUs    int               `json:"host_cpus"`
	GOMAXPROCS  int               `json:"gomaxprocs"`
	CommandLine []string          `json:"command_line,omitempty"` // secrets redacted
	Labels      map[string]string `json:"labels,omitempty"`
	StartUTC    string            `json:"start_utc"`
	EndUTC      string            `json:"end_utc"`
	// Endpoint is Target without credentials.
	Endpoint     string `json:"endpoint"`
	ServerHeader string `json:"server_header"`
	ServerModels any    `json:"server_models"` // the /v1/models answer, or NotRecorded
	// Server is what the server said it is on its own info routes; Host
	// is the client's machine. Absent in runs recorded before them.
	Server        *ServerIdentity `json:"server,omitempty"`
	Host          *HostInfo       `json:"host,omitempty"`
	TimeToReadyMs any             `json:"time_to_ready_ms"`
	// IdleWaitMs is how long the run waited for the server to report no
	// running or waiting requests before it began (with a wait asked for).
	IdleWaitMs     *float64 `json:"idle_wait_ms,omitempty"`
	WorkloadSHA256 string   `json:"workload_sha256"`
	Tokenizer      string   `json:"tokenizer"`
	// TokenizerFailures counts token counts the server's /tokenize failed.
	TokenizerFailures int64 `json:"tokenizer_failures,omitempty"`
	// PromptTruncation counts requests whose prompt the server reports
	// (usage.prompt_tokens) as shorter than sent by more than a chat
	// template could explain: the server cut them. Absent when none.
	PromptTruncation *PromptTruncation `json:"prompt_truncation,omitempty"`
	// Features counts, per feature (replay.Features), the requests that
	// carried it, were sent with it, had it stripped on purpose, or had it
	// refused by the target. Absent when no request carried any.
	Features map[string]FeatureCount `json:"features,omitempty"`
	// Notes say which workload values replay ignored, capped or cleaned
	// (a NaN think time, say), with counts.
	Notes []string `json:"notes,omitempty"`
	// Client describes the load generator's own health during the run.
	Client ClientHealth `json:"client"`
	// Metrics lists the server metrics scrapes written to the run dir
	// (metrics/*.prom: a header line, then the endpoint's answer, or
	// "# scrape failed: …"; ScrapeCutPrefix's line after the header when
	// the answer was too long to keep whole).
	Metrics []string `json:"metrics_scrapes,omitempty"`
	// Files lists every file of the run dir but run.json, with its sha256.
	Files []FileHash `json:"files"`
}

// ClientFloor is the latency the client adds to a TTFT: its reported TTFT
// less the server's own time from the request's arrival to its first
// token, over Requests sequential requests to a loopback server.
type ClientFloor struct {
	P50Ms    float64 `json:"p50_ms"`
	P90Ms    float64 `json:"p90_ms"`
	MaxMs    float64 `json:"max_ms"`
	Requests int     `json:"requests"`
}

// FeatureCount is what replay did with one feature: of the requests that
// carried it (Carried = Sent + Stripped), how many were sent with it, had it
// stripped, and had it refused (a 4xx naming it, among those sent).
type FeatureCount struct {
	Carried  int64 `json:"carried"`
	Sent     int64 `json:"sent"`
	Stripped int64 `json:"stripped"`
	Refused  int64 `json:"refused"`
}

// PromptTruncation summarises prompts a server cut silently: requests whose
// usage_prompt_tokens fell short of prompt_tokens_sent by more than the
// tolerance (the larger of ToleranceTokens and TolerancePct of the prompt),
// and by how many tokens.
type PromptTruncation struct {
	Requests         int64   `json:"requests"`
	Checked          int64   `json:"checked"` // requests whose usage reported prompt tokens
	MaxDeficitTokens int64   `json:"max_deficit_tokens"`
	P50DeficitTokens int64   `json:"p50_deficit_tokens"`
	ToleranceTokens  int64   `json:"tolerance_tokens"`
	TolerancePct     float64 `json:"tolerance_pct"`
}

// ServerIdentity is a server's identity as its own routes state it (vLLM
// /version and /v1/models, SGLang /server_info, TGI /info, Ollama
// /api/version and /api/show, llama.cpp /props). A field nobody stated
// holds NotRecorded (ContextTokens: 0).
type ServerIdentity struct {
	// Engine is vllm, sglang, tgi, ollama, llama.cpp or servetrace-sim.
	Engine  string `json:"engine"`
	Version string `json:"version"`
	// Model is the weights loaded (a path or hub id), beside the served
	// name a request asks for.
	Model string `json:"model"`
	// ContextTokens is the context length the server enforces.
	ContextTokens int64 `json:"context_tokens,omitempty"`
	// Details are further settings the server states (tp_size, dtype,
	// total_slots, block_size, ...), by the server's own names.
	Details map[string]string `json:"details,omitempty"`
	// Sources are the routes that answered.
	Sources []string `json:"sources"`
}

// HostInfo describes the client's machine, which bounds what a run can
// measure (docs/architecture.md).
type HostInfo struct {
	CPUModel string `json:"cpu_model"`
	Cores    int    `json:"cores"`
	Kernel   string `json:"kernel"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// NotRecorded marks a run.json field whose value could not be recorded.
const NotRecorded = "not-recorded"

// ClientHealth summarises the replay client's resource use, so a starved
// receive loop is visible instead of silently inflating ITL.
type ClientHealth struct {
	// CPUSeconds is user+system CPU the client process used during the run;
	// CPUUtilization is that over wall time and GOMAXPROCS (1 = all cores busy).
	CPUSeconds     float64 `json:"cpu_seconds"`
	CPUUtilization float64 `json:"cpu_utilization"`
	// SchedLatencyP99Ms is the Go scheduler's p99 wait from runnable to
	// running over the run: goroutines reading sockets wait this long.
	SchedLatencyP99Ms float64 `json:"sched_latency_p99_ms"`
	SchedLatencyMaxMs float64 `json:"sched_latency_max_ms"`
	GCCycles          uint32  `json:"gc_cycles"`
	// BuiltAtSend counts requests whose body the client built at their
	// send time (lateness then includes building it), where the look-ahead
	// had not built it before.
	BuiltAtSend int64 `json:"built_at_send"`
	// Samples is the per-second series file in the run dir.
	Samples string `json:"samples,omitempty"`
}

// FileHash names one file of a run dir and its sha256.
type FileHash struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// OutcomeCt counts results by outcome class.
type OutcomeCt map[string]int64

// ResultWriter appends result rows to DIR/results/part-NNNNN.parquet,
// rotating parts every RotateRows rows. A part appears under its final name
// only once whole, so a crash loses at most the rows of the open part.
//
// The file each part is written through is opened ahead, when the writer
// is made and again after each part, and held: a run whose descriptors
// are all taken when its rows are due (a flood of connections to a
// receiver beside it, a slow server holding thousands of requests) still
// writes them. An opening that fails is tried again at each row and part
// after, and the rows of a part that cannot be written stay held.
type ResultWriter struct {
	dir        string
	rotateRows int
	lock       *outputLock
	buf        []Result
	seq        int
	parts      []Part
	encode     func(func()) // runs a part's encoding; nil runs it in place
	next       *os.File     // the next part's file, opened ahead; nil: none yet
}

// SetEncoder makes the writer hand each part's encoding, tens of
// milliseconds of CPU for a part of 10,000 rows, to run, which must call
// it before returning: a load generator runs it where it cannot delay the
// requests it times.
func (w *ResultWriter) SetEncoder(run func(encode func())) { w.encode = run }

// NewResultWriter creates runDir/results and locks runDir against a second
// writer until Close. It refuses a run directory that already holds
// results, so a new run never mixes with an old one.
func NewResultWriter(runDir string, rotateRows int) (*ResultWriter, error) {
	if rotateRows <= 0 {
		rotateRows = 64 << 10
	}
	lock, err := lockOutput(runDir, "writer")
	if err != nil {
		return nil, err
	}
	w, err := newResultWriter(runDir, rotateRows)
	if err != nil {
		lock.release()
		return nil, err
	}
	w.lock = lock
	return w, nil
}

// Close removes the part file opened ahead and releases the run
// directory's lock; rows not flushed are not written. It may be called
// more than once.
func (w *ResultWriter) Close() {
	if w.next != nil {
		w.next.Close()
		os.Remove(w.next.Name())
		w.next = nil
	}
	w.lock.release()
}

// reserve opens the next part's file ahead, if it is not open yet: a
// hidden temporary file in results/, renamed to the part once whole.
func (w *ResultWriter) reserve() error {
	if w.next != nil {
		return nil
	}
	f, err := os.CreateTemp(w.dir, ".part-*.parquet.tmp")
	if err != nil {
		return fmt.Errorf("open the next results part's file: %w", err)
	}
	w.next = f
	return nil
}

func newResultWriter(runDir string, rotateRows int) (*ResultWriter, error) {
	dir := filepath.Join(runDir, ResultsDir)
	if st, err := os.Lstat(dir); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("run directory %s: %s is not a directory (a symbolic link or a file): move it away or choose another output", runDir, dir)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("run directory %s already holds results: %w", runDir, ErrOutputExists)
	}
	if _, err := os.Stat(filepath.Join(runDir, RunInfoName)); err == nil {
		return nil, fmt.Errorf("run directory %s already holds a run.json: %w", runDir, ErrOutputExists)
	}
	if err := MakeDir(dir); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	w := &ResultWriter{dir: dir, rotateRows: rotateRows}
	if err := w.reserve(); err != nil {
		return nil, err
	}
	return w, nil
}

// Write appends one result.
func (w *ResultWriter) Write(r Result) error {
	w.reserve() // a failure is tried again at the next row, and the part
	w.buf = append(w.buf, r)
	if len(w.buf) >= w.rotateRows {
		return w.Flush()
	}
	return nil
}

// Flush writes the buffered rows as a part file.
func (w *ResultWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	rel := fmt.Sprintf("part-%05d.parquet", w.seq)
	path := filepath.Join(w.dir, rel)
	if err := w.reserve(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f := w.next
	w.next = nil
	var err error
	encode := func() {
		err = commitTemp(f, path, func(out io.Writer) error { return encodeParquet(out, w.buf, DefaultRowGroupRows) })
	}
	if w.encode != nil {
		w.encode(encode)
	} else {
		encode()
	}
	w.reserve() // for the next part; a failure is tried again later
	if err != nil {
		return err
	}
	w.seq++
	w.parts = append(w.parts, Part{Path: ResultsDir + "/" + rel, Rows: int64(len(w.buf))})
	w.buf = w.buf[:0]
	return nil
}

// Parts returns the parts written so far.
func (w *ResultWriter) Parts() []Part { return slices.Clone(w.parts) }

// ScrapeCutPrefix starts the comment line a scrape file holds after its
// header when the endpoint's answer passed the most replay keeps (32 MiB)
// and only its first whole lines were kept.
const ScrapeCutPrefix = "# servetrace scrape cut:"

// maxRunInfoBytes bounds run.json: it lists a run's parts and files, a few
// hundred bytes each, so even a day-long run's is a few MB.
const maxRunInfoBytes = 256 << 20

// ReadRunInfo reads runDir/run.json.
func ReadRunInfo(runDir string) (*RunInfo, error) {
	path := filepath.Join(runDir, RunInfoName)
	b, err := regfile.ReadFile(path, maxRunInfoBytes)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(runDir); serr != nil {
			return nil, fmt.Errorf("open run %s: %w", runDir, serr)
		}
		return nil, fmt.Errorf("open run %s: no %s: not a servetrace run directory (write one with 'servetrace replay')", runDir, RunInfoName)
	}
	if err != nil {
		return nil, fmt.Errorf("open run: %w", err)
	}
	var ri RunInfo
	if err := json.Unmarshal(b, &ri); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &ri, nil
}

// ResultParts lists the result parts of a run directory to read. A complete
// run's run.json lists its parts: exactly those are read, each must hold the
// rows listed, and any other part file is an error (a copied part would
// count its rows twice). An interrupted or killed run lists none, so every
// part on disk is read and its rows are not lost; Rows is then -1.
func ResultParts(runDir string) ([]Part, error) {
	dir := filepath.Join(runDir, ResultsDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read results of %s: %w", runDir, err)
	}
	var onDisk []string
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".parquet") {
			continue
		}
		onDisk = append(onDisk, ResultsDir+"/"+e.Name())
	}
	info, err := ReadRunInfo(runDir)
	if err != nil || !info.Complete || len(info.Parts) == 0 {
		parts := make([]Part, len(onDisk))
		for i, p := range onDisk {
			parts[i] = Part{Path: p, Rows: -1}
		}
		return parts, nil
	}
	listed := map[string]bool{}
	for _, p := range info.Parts {
		if !slices.Contains(onDisk, p.Path) {
			return nil, fmt.Errorf("run %s: %s, listed in %s, is missing: the run dir is incomplete; copy it again", runDir, filepath.Join(runDir, p.Path), RunInfoName)
		}
		listed[p.Path] = true
	}
	for _, p := range onDisk {
		if !listed[p] {
			return nil, fmt.Errorf("run %s: %s is not listed in %s (a copied or foreign part would count twice): remove it", runDir, filepath.Join(runDir, p), RunInfoName)
		}
	}
	return slices.Clone(info.Parts), nil
}

// ReadResults reads the result parts of a run directory (ResultParts) and
// checks every row (Result.Validate).
func ReadResults(runDir string) ([]Result, error) {
	parts, err := ResultParts(runDir)
	if err != nil {
		return nil, err
	}
	var rows []Result
	for _, p := range parts {
		part, err := readPartFile[Result](filepath.Join(runDir, p.Path))
		if err != nil {
			return nil, err
		}
		if p.Rows >= 0 && int64(len(part)) != p.Rows {
			return nil, fmt.Errorf("run %s: %s holds %d rows, %s says %d: the part was replaced", runDir, p.Path, len(part), RunInfoName, p.Rows)
		}
		for i := range part {
			if err := part[i].Validate(); err != nil {
				return nil, fmt.Errorf("run %s: %s row %d: %w", runDir, p.Path, i+1, err)
			}
		}
		rows = append(rows, part...)
	}
	return rows, nil
}

// StartTime returns the run's start as a time.Time.
func (ri *RunInfo) StartTime() time.Time { return time.Unix(0, ri.StartUnixNs).UTC() }
