package datasets

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// rejectLog is a conversion's own account of its rejects, beside the bucket
// writer's: a copy of each in a file next to the output, and for each reason
// (digits folded, as the manifest counts them) its count and first line.
// A conversion that fails, for its rejects or otherwise, still leaves
// OUT/_rejects.jsonl to read, although the writer's copy goes with its
// staging directory, and its error names the reasons and where each starts.
type rejectLog struct {
	Sink
	out, name string // the output directory, and the rejects file's name in it
	shard     string // the writer's shard, "" for none
	tmp       string
	f         *os.File
	w         *bufio.Writer
	reasons   map[string]*reasonTally
	files     map[string]bool
}

// reasonTally counts one reason and keeps its first reject.
type reasonTally struct {
	n     int64
	first trace.Reject
}

func newRejectLog(next Sink, out, shard string) *rejectLog {
	name := trace.RejectsName
	if shard != "" {
		name = "_rejects.shard-" + shard + ".jsonl"
	}
	return &rejectLog{Sink: next, out: out, name: name, shard: shard, reasons: map[string]*reasonTally{}, files: map[string]bool{}}
}

func (l *rejectLog) Reject(r trace.Reject) error {
	key := foldDigits(r.Reason)
	t := l.reasons[key]
	if t == nil {
		t = &reasonTally{first: r}
		l.reasons[key] = t
	}
	t.n++
	l.files[r.File] = true
	if l.f == nil {
		if err := l.create(); err != nil {
			return err
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode reject: %w", err)
	}
	if _, err := l.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write the rejects beside %s: %w", l.out, err)
	}
	return l.Sink.Reject(r)
}

// create opens the copy, hidden beside the output (where the writer stages
// its own files), with the mode every output file gets (0644 less umask).
func (l *rejectLog) create() error {
	var rnd [8]byte
	rand.Read(rnd[:])
	parent, base := filepath.Split(filepath.Clean(l.out))
	if parent == "" {
		parent = "."
	}
	l.tmp = filepath.Join(parent, "."+base+".rejects-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := trace.CreateFile(l.tmp)
	if err != nil {
		return fmt.Errorf("create a file for the rejects beside %s: %w", l.out, err)
	}
	l.f, l.w = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

// keep moves the copy into the output directory as its rejects file (the
// directory is made if need be), unless the output holds a trace: one that
// a failed --force keeps stays exactly as it was. It returns what to add
// to the conversion's error: where the rejects are, or why they are not.
func (l *rejectLog) keep() string {
	if l.f == nil {
		return ""
	}
	defer l.discard()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	if err != nil {
		return fmt.Sprintf("; the rejected lines could not be written out (%v)", err)
	}
	manifests := []string{trace.ManifestName}
	if l.shard != "" {
		manifests = append(manifests, "_manifest.shard-"+l.shard+".json")
	}
	for _, m := range manifests {
		if _, err := os.Stat(filepath.Join(l.out, m)); err == nil {
			return fmt.Sprintf("; %s holds an earlier trace, left as it was, so the rejected lines were not written there (convert into a new directory to see them)", l.out)
		}
	}
	dst := filepath.Join(l.out, l.name)
	if err := os.MkdirAll(l.out, 0o755); err != nil {
		return fmt.Sprintf("; the rejected lines could not be written out (%v)", err)
	}
	if err := os.Rename(l.tmp, dst); err != nil {
		return fmt.Sprintf("; the rejected lines could not be written out (%v)", err)
	}
	return "; each rejected line and its reason is in " + dst
}

// discard removes the copy, if it is still there.
func (l *rejectLog) discard() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	if l.tmp != "" {
		os.Remove(l.tmp)
		l.tmp = ""
	}
}

// summary names the commonest reasons, each with its count and first line
// ("312 lines: ts: no timestamp at time | created; first at line 1"), so
// the error alone says what to fix. Lines are counted by reason with
// digits folded, and the first line's own reason is shown; the file is
// named where the rejects come from more than one.
func (l *rejectLog) summary() string {
	type rc struct {
		reason string
		t      *reasonTally
	}
	all := make([]rc, 0, len(l.reasons))
	for r, t := range l.reasons {
		all = append(all, rc{r, t})
	}
	slices.SortFunc(all, func(a, b rc) int { return cmp.Or(cmp.Compare(b.t.n, a.t.n), strings.Compare(a.reason, b.reason)) })
	const top = 3
	var parts []string
	var restLines int64
	for i, x := range all {
		if i >= top {
			restLines += x.t.n
			continue
		}
		where := fmt.Sprintf("line %d", x.t.first.Line)
		if len(l.files) > 1 {
			where = fmt.Sprintf("%s line %d", x.t.first.File, x.t.first.Line)
		}
		parts = append(parts, fmt.Sprintf("%s: %s; first at %s", lines(x.t.n), x.t.first.Reason, where))
	}
	if len(all) > top {
		other := "other reasons"
		if len(all)-top == 1 {
			other = "other reason"
		}
		parts = append(parts, fmt.Sprintf("and %s for %d %s", lines(restLines), len(all)-top, other))
	}
	return strings.Join(parts, "; ")
}

func lines(n int64) string {
	if n == 1 {
		return "1 line"
	}
	return fmt.Sprintf("%d lines", n)
}
