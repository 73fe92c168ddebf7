package trace

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/servetrace/servetrace/internal/regfile"
)

var shardManifestRE = regexp.MustCompile(`^_manifest\.shard-(\d+)-of-(\d+)\.json$`)

// MaxShards bounds the shards a conversion is split into: a merge reads
// the count from the shard manifests' names, and a planted name must not
// set it to billions.
const MaxShards = 4096

// MergeShards joins the manifests that N converting shards wrote into dir
// (and their rejects) into one _manifest.json, after checking that every
// shard 0..N-1 finished and that they agree on how ids and blocks were made.
// The shard manifests and rejects are removed once the merged ones are in
// place.
func MergeShards(dir string) (*Manifest, error) {
	lock, err := lockOutput(dir, "writer")
	if err != nil {
		return nil, fmt.Errorf("merge shards: %w", err)
	}
	defer lock.release()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("merge shards: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return nil, fmt.Errorf("merge shards: %s already holds a merged %s", dir, ManifestName)
	}
	byIndex := map[int]*Manifest{}
	names := map[int]string{}
	total := -1
	for _, e := range ents {
		m := shardManifestRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		i, ierr := strconv.Atoi(m[1])
		n, nerr := strconv.Atoi(m[2])
		if ierr != nil || nerr != nil || n < 1 || n > MaxShards || i >= n {
			return nil, fmt.Errorf("merge shards: %s in %s names shard %s of %s: want I-of-N with 0 <= I < N <= %d; move the file away if servetrace did not write it", e.Name(), dir, m[1], m[2], MaxShards)
		}
		if total >= 0 && n != total {
			return nil, fmt.Errorf("merge shards: %s says %d shards, another manifest %d: two conversions share %s", e.Name(), n, total, dir)
		}
		total = n
		man, err := readManifestFile(dir, e.Name())
		if err != nil {
			return nil, err
		}
		byIndex[i], names[i] = man, e.Name()
	}
	if total < 0 {
		return nil, fmt.Errorf("merge shards: no shard manifests (_manifest.shard-I-of-N.json) in %s: convert it in shards first", dir)
	}
	var missing []int
	for i := range total {
		if byIndex[i] == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("merge shards: shards %v of %d have not finished (no manifest); rerun them, then merge", missing, total)
	}
	ref := 0 // the first shard that converted something sets the terms
	for i := range total {
		if len(byIndex[i].Sources) > 0 {
			ref = i
			break
		}
	}
	out := *byIndex[ref]
	out.Sources, out.Parts, out.Notes, out.RejectReasons = nil, nil, nil, nil
	out.Rows, out.Rejects = 0, 0
	notes := map[string]bool{} // the notes in out, each kept once
	for i := range total {
		m := byIndex[i]
		differs := m.BlockSize != out.BlockSize || m.PrefixIDs != out.PrefixIDs || m.SaltFingerprint != out.SaltFingerprint || m.Tokenizer != out.Tokenizer || m.TimesRelative != out.TimesRelative
		if len(m.Sources) > 0 && differs {
			return nil, fmt.Errorf("merge shards: shard %d made ids or blocks differently (block size %d, prefix ids %s, salt %s, tokenizer %q) from shard %d (%d, %s, %s, %q): convert every shard with the same salt, tokenizer and block size",
				i, m.BlockSize, m.PrefixIDs, m.SaltFingerprint, m.Tokenizer, ref, out.BlockSize, out.PrefixIDs, out.SaltFingerprint, out.Tokenizer)
		}
		out.Sources = append(out.Sources, m.Sources...)
		out.Parts = append(out.Parts, m.Parts...)
		out.Rows += m.Rows
		out.Rejects += m.Rejects
		if m.Rows > 0 && (out.Start.IsZero() || m.Start.Before(out.Start)) {
			out.Start = m.Start
		}
		if m.End.After(out.End) {
			out.End = m.End
		}
		for _, n := range m.Notes {
			if !notes[n] {
				notes[n] = true
				out.Notes = append(out.Notes, n)
			}
		}
		for r, k := range m.RejectReasons {
			if out.RejectReasons == nil {
				out.RejectReasons = map[string]int64{}
			}
			out.RejectReasons[r] += k
		}
		out.SaltRandom = out.SaltRandom || m.SaltRandom
	}
	slices.SortFunc(out.Parts, func(a, b Part) int { return cmp.Or(cmp.Compare(a.MinTS, b.MinTS), cmp.Compare(a.Path, b.Path)) })
	if out.SaltRandom {
		out.Notes = append(out.Notes, "some shards used a random salt: their ids do not link with the other shards'")
	}
	if err := checkManifestCounts(len(out.Parts), len(out.Sources), len(out.Notes)); err != nil {
		return nil, fmt.Errorf("merge shards in %s: together they hold %w: split the source into several buckets", dir, err)
	}
	// Rejects first, manifest last: a merged manifest means a merged bucket.
	var rejectFiles []string
	for i := range total {
		p := filepath.Join(dir, "_rejects.shard-"+strconv.Itoa(i)+"-of-"+strconv.Itoa(total)+".jsonl")
		if _, err := os.Stat(p); err == nil {
			rejectFiles = append(rejectFiles, p)
		}
	}
	if len(rejectFiles) > 0 {
		if err := concatAtomic(filepath.Join(dir, RejectsName), rejectFiles); err != nil {
			return nil, err
		}
	}
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), &out); err != nil {
		return nil, err
	}
	for i := range total {
		os.Remove(filepath.Join(dir, names[i]))
	}
	for _, p := range rejectFiles {
		os.Remove(p)
	}
	return &out, nil
}

// concatAtomic writes the files' contents, in order, to path via a
// temporary file.
func concatAtomic(path string, files []string) error {
	err := WriteFileAtomic(path, func(w io.Writer) error {
		for _, f := range files {
			in, err := regfile.Open(f)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, in)
			in.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("merge rejects: %w", err)
	}
	return nil
}
