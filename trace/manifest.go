package trace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/servetrace/servetrace/internal/regfile"
)

// ToolVersion is servetrace's version, written into manifests and run.json.
const ToolVersion = "0.1.0"

// ManifestName is the manifest's file name inside a bucket directory.
const ManifestName = "_manifest.json"

// RejectsName is the rejected-lines file's name inside a bucket directory.
const RejectsName = "_rejects.jsonl"

// Prefix id kinds for Manifest.PrefixIDs.
const (
	PrefixIDsNone       = "none"        // the source had no prefix information
	PrefixIDsSource     = "source"      // ids copied from the source (e.g. Mooncake's remapped hash_ids)
	PrefixIDsSaltedHash = "salted-hash" // keyed 64-bit hashes computed by servetrace
	PrefixIDsSynthetic  = "synthetic"   // ids invented by a generator
	PrefixIDsDense      = "dense"       // renumbered 0, 1, 2... by first appearance
)

// Source describes one input that went into a bucket.
type Source struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	SHA256 string `json:"sha256"`
	Rows   int64  `json:"rows"`
	// Rejects counts input lines that could not be converted.
	Rejects int64 `json:"rejects"`
	// TimeResolutionUs is the finest spacing the source's timestamps show,
	// in microseconds: fits on coarser data describe the quantizer.
	TimeResolutionUs int64 `json:"time_resolution_us"`
	// Citation and Licence are set for bundled public datasets.
	Citation string `json:"citation,omitempty"`
	Licence  string `json:"licence,omitempty"`
}

// Part is one Parquet file of a bucket, relative to the bucket directory.
type Part struct {
	Path  string `json:"path"`
	Rows  int64  `json:"rows"`
	MinTS int64  `json:"min_ts_us"`
	MaxTS int64  `json:"max_ts_us"`
}

// Manifest describes a bucket directory: what is in it and where it came from.
// It never holds a salt, only the salt's fingerprint.
type Manifest struct {
	SchemaVersion int       `json:"schema_version"`
	ToolVersion   string    `json:"tool_version"`
	Kind          string    `json:"kind"` // "trace" or "workload"
	CreatedAt     time.Time `json:"created_at,omitzero"`
	Sources       []Source  `json:"sources"`
	Rows          int64     `json:"rows"`
	Rejects       int64     `json:"rejects"`
	// Start and End are the first and last arrival times.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// TimesRelative says the source's times were offsets, anchored at Anchor.
	TimesRelative bool      `json:"times_relative"`
	Anchor        time.Time `json:"anchor,omitzero"`
	Tokenizer     string    `json:"tokenizer,omitempty"`
	BlockSize     int       `json:"block_size"`
	PrefixIDs     string    `json:"prefix_ids"`
	// SaltFingerprint identifies the salt that keyed ids and hashes, without
	// revealing it; empty where no salt was used.
	SaltFingerprint string `json:"salt_fingerprint,omitempty"`
	// SaltRandom says no salt was given: ids and hashes will not link with
	// any other conversion.
	SaltRandom bool `json:"salt_random,omitempty"`
	// RejectReasons counts rejected lines by reason.
	RejectReasons map[string]int64 `json:"reject_reasons,omitempty"`
	// Notes says what a reader of the bucket must know.
	Notes []string `json:"notes,omitempty"`
	// Generator records how a synthetic workload was made (model, seed, ...).
	Generator map[string]any `json:"generator,omitempty"`
	Parts     []Part         `json:"parts"`
}

// ReadManifest reads dir/_manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	m, err := readManifestFile(dir, ManifestName)
	if err != nil && errors.Is(err, errNoManifest) {
		if shards, _ := filepath.Glob(filepath.Join(dir, "_manifest.shard-*.json")); len(shards) > 0 {
			return nil, fmt.Errorf("open trace %s: it holds %d shard manifests but no %s: %w", dir, len(shards), ManifestName, ErrShardsNotMerged)
		}
	}
	return m, err
}

// ErrShardsNotMerged marks a directory that holds the manifests of a
// sharded conversion but not yet the merged one.
var ErrShardsNotMerged = errors.New("the shards have not been merged")

// errNoManifest marks a directory without the manifest asked for.
var errNoManifest = errors.New("no manifest")

// maxManifestBytes bounds a manifest: it lists a bucket's parts, a few
// hundred bytes each.
const maxManifestBytes = 256 << 20

// readManifestFile reads one manifest file of dir.
func readManifestFile(dir, name string) (*Manifest, error) {
	path := filepath.Join(dir, name)
	b, err := regfile.ReadFile(path, maxManifestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		if st, serr := os.Stat(dir); serr != nil {
			return nil, fmt.Errorf("open trace %s: %w", dir, serr)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("open trace %s: not a directory; give the directory that 'servetrace convert' or 'generate' wrote", dir)
		}
		return nil, fmt.Errorf("open trace %s: no %s: not a servetrace trace directory (write one with 'servetrace convert' or 'servetrace generate'): %w", dir, name, errNoManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if err := checkManifestShape(b); err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", path, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", path, err)
	}
	if m.SchemaVersion > SchemaVersion {
		return nil, fmt.Errorf("read manifest %s: schema version %d is newer than this servetrace understands (%d); upgrade servetrace", path, m.SchemaVersion, SchemaVersion)
	}
	return &m, nil
}

// WriteJSONAtomic writes v as indented JSON to path via a temporary file and a
// rename, so readers never see a half-written file.
func WriteJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// WriteFileAtomic writes path through a hidden temporary file in its
// directory, synced and renamed into place, so a failure or a crash never
// leaves a file under the final name that looks whole but is not, and
// readers never see one. The file gets 0644 less the umask, as os.Create
// would make it.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return commitTemp(tmp, path, write)
}

// commitTemp is WriteFileAtomic's second half: it writes tmp, a hidden
// temporary file in path's directory, syncs and closes it and renames it
// to path; tmp is removed on any failure.
func commitTemp(tmp *os.File, path string, write func(io.Writer) error) error {
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), filePerm()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// HashFile returns the hex sha256 of the file at path.
func HashFile(path string) (string, error) {
	f, err := regfile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HashBytes returns the hex sha256 of b.
func HashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
