package analyze

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/servetrace/servetrace/analyze/peer"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace"
)

// ExpandRunDirs expands one side of a comparison or a sweep argument: a run
// directory or a peer tool's result file, a comma-separated list of them,
// or a directory holding them (a sweep: run directories, or result files
// told apart by content, up to three levels down). A servetrace sweep
// directory gives its measuring steps; DIR#CONFIG one configuration's.
func ExpandRunDirs(arg string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(arg, ",") {
		if p == "" {
			continue
		}
		if isRunDir(p) || peer.IsResultFile(p) {
			out = append(out, p)
			continue
		}
		if dirs, ok, err := sweepRunDirs(p); ok {
			if err != nil {
				return nil, err
			}
			out = append(out, dirs...)
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: not a run directory or result file: %w", p, err)
		}
		if !st.IsDir() { // a regular file would be a result file
			return nil, fmt.Errorf("not a run directory or a result file: %w", regfile.Check(p))
		}
		found, err := findRuns(p, 3)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: not a servetrace run directory (no run.json in it or below) and no result file of a supported tool in it: give a run directory written by servetrace replay, or a result file of %s", p, peer.Tools)
		}
		out = append(out, found...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no run directory", arg)
	}
	return out, nil
}

// isRunDir reports whether p is a servetrace run directory.
func isRunDir(p string) bool {
	_, err := os.Stat(filepath.Join(p, "run.json"))
	return err == nil
}

// findRuns lists the run directories and peer result files under root,
// at most depth levels down, in lexical order; a run directory's own
// files are not searched.
func findRuns(root string, depth int) ([]string, error) {
	root = filepath.Clean(root)
	var out []string
	var files []peerFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		if strings.Count(strings.TrimPrefix(path, root), string(filepath.Separator)) > depth {
			return fs.SkipDir
		}
		if d.IsDir() {
			if isRunDir(path) {
				out = append(out, path)
				return fs.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); d.Type().IsRegular() && (ext == ".json" || ext == ".jsonl") {
			runs, err := peer.Detect(path)
			switch {
			case err == nil:
				files = append(files, describePeerFile(path, runs))
			case !errors.Is(err, peer.ErrNotPeer):
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", root, err)
	}
	for _, f := range dropSummariesBesideRecords(files) {
		out = append(out, f.path)
	}
	sort.Strings(out)
	return dropSweepRollups(out), nil
}

// peerFile is a result file found in a directory: its tool and whether it
// holds per-request data or only a summary.
type peerFile struct {
	path, tool string
	summary    bool
}

func describePeerFile(path string, runs []peer.Run) peerFile {
	f := peerFile{path: path, summary: true}
	for _, r := range runs {
		f.tool = r.ToolKey()
		if r.HasRecords() {
			f.summary = false
		}
	}
	return f
}

// dropSummariesBesideRecords removes a tool's summary files from a
// directory that holds that tool's per-request file too: an AIPerf,
// GenAI-Perf or LLMPerf artifact directory has both, and the summary
// repeats the records' run.
func dropSummariesBesideRecords(files []peerFile) []peerFile {
	records := map[[2]string]bool{}
	for _, f := range files {
		if !f.summary {
			records[[2]string{filepath.Dir(f.path), f.tool}] = true
		}
	}
	var out []peerFile
	for _, f := range files {
		if f.summary && records[[2]string{filepath.Dir(f.path), f.tool}] {
			continue
		}
		out = append(out, f)
	}
	return out
}

// dropSweepRollups removes the files of a `vllm bench sweep` directory
// that repeat or precede its runs: in a directory of run=N.json files,
// summary.json (the array of those runs) and warmup.json, and the
// SLA--*.json arrays above them, so no run is counted twice.
func dropSweepRollups(paths []string) []string {
	runDirs := map[string]bool{}
	for _, p := range paths {
		if strings.HasPrefix(filepath.Base(p), "run=") {
			runDirs[filepath.Dir(p)] = true
		}
	}
	if len(runDirs) == 0 {
		return paths
	}
	out := paths[:0]
	for _, p := range paths {
		dir, base := filepath.Dir(p), filepath.Base(p)
		switch {
		case runDirs[dir] && (base == "summary.json" || base == "warmup.json"):
		case strings.HasPrefix(base, "SLA--") && hasRunsBelow(runDirs, dir):
		default:
			out = append(out, p)
		}
	}
	return out
}

// hasRunsBelow reports whether a directory of run=N.json files lies
// under dir.
func hasRunsBelow(runDirs map[string]bool, dir string) bool {
	for d := range runDirs {
		if strings.HasPrefix(d, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// maxSweepRecordBytes bounds a sweep.json read here, as sweep reads it.
const maxSweepRecordBytes = 256 << 20

// sweepRunDirs lists the measuring steps' run directories of a sweep
// directory (servetrace sweep's sweep.json), or of one configuration of it
// with DIR#CONFIG; recovery steps, started on an overload's backlog, are
// left out. ok is false when p is not a sweep.
func sweepRunDirs(p string) (dirs []string, ok bool, err error) {
	dir, config, _ := strings.Cut(p, "#")
	path := filepath.Join(dir, "sweep.json")
	if _, err := os.Lstat(path); err != nil {
		return nil, false, nil
	}
	b, err := regfile.ReadFile(path, maxSweepRecordBytes)
	if err != nil {
		return nil, true, err
	}
	var rec struct {
		Steps []struct {
			Config  string `json:"config"`
			Purpose string `json:"purpose"`
			Status  string `json:"status"`
			RunDir  string `json:"run_dir"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, true, fmt.Errorf("%s: %w", path, err)
	}
	configs := map[string]bool{}
	for _, s := range rec.Steps {
		configs[s.Config] = true
		if s.Status == "done" && s.Purpose != "recovery" && (config == "" || s.Config == config) {
			rd, err := trace.InsideDir(dir, s.RunDir, path+" run_dir")
			if err != nil {
				return nil, true, err
			}
			dirs = append(dirs, rd)
		}
	}
	if len(dirs) == 0 {
		if config != "" && !configs[config] {
			return nil, true, fmt.Errorf("%s: the sweep has no configuration %q (it has %v)", p, config, slices.Sorted(maps.Keys(configs)))
		}
		return nil, true, fmt.Errorf("%s: the sweep has no finished step yet", p)
	}
	return dirs, true, nil
}
