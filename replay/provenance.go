package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/servetrace/servetrace/replay/scrub"
	"github.com/servetrace/servetrace/trace"
)

// toolCommit returns the VCS revision the binary was built from ("-dirty"
// when the tree had changes), or trace.NotRecorded.
func toolCommit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return trace.NotRecorded
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return trace.NotRecorded
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// workloadDigest is the sha256 over the workload's parts, in manifest
// order: each line "path sha256(part)". Two workloads with the same digest
// hold the same bytes.
func workloadDigest(dir string, m *trace.Manifest) string {
	h := sha256.New()
	for _, p := range m.Parts {
		sum, err := trace.HashFile(filepath.Join(dir, p.Path))
		if err != nil {
			return trace.NotRecorded
		}
		fmt.Fprintf(h, "%s %s\n", p.Path, sum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hashRunDir lists every finished file of the run dir but run.json, with
// its sha256, in path order.
func hashRunDir(runDir string) []trace.FileHash {
	var out []trace.FileHash
	filepath.WalkDir(runDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		rel, _ := filepath.Rel(runDir, p)
		if rel == trace.RunInfoName {
			return nil
		}
		st, serr := os.Stat(p)
		sum, herr := trace.HashFile(p)
		if serr != nil || herr != nil {
			sum = trace.NotRecorded
		}
		var size int64
		if st != nil {
			size = st.Size()
		}
		out = append(out, trace.FileHash{Path: filepath.ToSlash(rel), Bytes: size, SHA256: sum})
		return nil
	})
	return out
}

// urlFlags are the flags whose values are URLs.
var urlFlags = map[string]bool{"target": true, "metrics-url": true}

// RedactArgs returns a command line with secrets replaced: --header values
// (Name=value keeps Name), and the user info and query values of every URL
// (scrub.URL), whether given to --target and --metrics-url or anywhere
// else. API keys never appear as flag values to begin with (--api-key-env
// and --api-key-file name where they are).
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		name, value, inline := strings.Cut(a, "=")
		flag := strings.TrimLeft(name, "-")
		isFlag := strings.HasPrefix(name, "-")
		switch {
		case isFlag && flag == "header" && inline:
			out[i] = name + "=" + redactHeader(value)
		case isFlag && flag == "header" && i+1 < len(out):
			out[i+1] = redactHeader(out[i+1])
			i++
		case isFlag && urlFlags[flag] && inline:
			out[i] = name + "=" + scrub.URL(value)
		case isFlag && urlFlags[flag] && i+1 < len(out):
			out[i+1] = scrub.URL(out[i+1])
			i++
		default:
			out[i] = scrub.URLs(a)
		}
	}
	return out
}

func redactHeader(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k + "=<redacted>"
}
