package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

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

// endpointWithoutCredentials strips user info and the query (which may hold
// a key) from a base URL.
func endpointWithoutCredentials(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return trace.NotRecorded
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
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

// RedactArgs returns a command line with the values of secret-bearing flags
// replaced: --header values (Name=value keeps Name) and anything that looks
// like a key given inline. API keys never appear as flag values to begin
// with (--api-key-env and --api-key-file name where they are).
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		name, value, inline := strings.Cut(a, "=")
		if name != "--header" && name != "-header" {
			continue
		}
		if inline {
			out[i] = name + "=" + redactHeader(value)
		} else if i+1 < len(out) {
			out[i+1] = redactHeader(out[i+1])
			i++
		}
	}
	return out
}

func redactHeader(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k + "=<redacted>"
}
