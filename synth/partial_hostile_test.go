package synth

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/internal/procstat"
	"github.com/servetrace/servetrace/trace"
)

// smallPartial fits a 300-row trace as shard 0 of 1 and writes its
// partial, returning its path and its two lines.
func smallPartial(t *testing.T) (path string, header, state []byte) {
	t.Helper()
	var rows []trace.Request
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range 300 {
		rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint(i)}, TS: 1_700_000_000_000_000 + int64(i)*2_000_000,
			Shape: trace.Shape{InputTokens: 600 + rng.Int64N(400), OutputTokens: 10 + rng.Int64N(90), API: trace.APIChat, PrefixBlocks: []int64{int64(1 + rng.IntN(5)), int64(100 + i)}}})
	}
	dir := writeBucket(t, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	p, err := FitPartial(context.Background(), dir, FitOptions{}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "good.fitpart.gz")
	if err := WritePartial(path, p); err != nil {
		t.Fatal(err)
	}
	header, state = partialLines(t, path)
	return path, header, state
}

// writeBomb writes a gzip file of head, then chunk repeated n times,
// then tail: each chunk its own gzip member (readers join members into
// one stream), so a file of a few MB inflates to n × len(chunk) bytes
// without compressing them all here.
func writeBomb(t *testing.T, path string, head []byte, chunk string, n int, tail []byte) {
	t.Helper()
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		gz.Write(b)
		gz.Close()
		return buf.Bytes()
	}
	var out bytes.Buffer
	out.Write(member(head))
	c := member([]byte(strings.Repeat(chunk, (1<<20)/len(chunk))))
	for range n {
		out.Write(c)
	}
	out.Write(member(tail))
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadPartialRefusesBombs (issue 42, 2): a partial whose gzip stream
// inflates far past what its header says it holds is refused once it
// passes the limit, naming the limit, with memory that does not follow
// the stream: before, an 11 MB partial of arrival times grew the merge to
// gigabytes. A merge whose partials hold more first turns together than
// it may is refused before any statistics are read.
func TestReadPartialRefusesBombs(t *testing.T) {
	good, header, state := smallPartial(t)
	var h PartialHeader
	if err := json.Unmarshal(header, &h); err != nil {
		t.Fatal(err)
	}
	arrivalsAt := bytes.Index(state, []byte(`"arrivals_s":[`)) + len(`"arrivals_s":[`)
	prefixAt := bytes.Index(state, []byte(`"prefix":`))
	if arrivalsAt < len(`"arrivals_s":[`) || prefixAt < 0 {
		t.Fatalf("the statistics line changed shape: %.200s", state)
	}
	defer func(old int64) { maxPartialStatsBytes = old }(maxPartialStatsBytes)
	maxPartialStatsBytes = 8 << 20
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		// head is written before 400 MiB of chunk, then tail.
		head  []byte
		chunk string
		tail  []byte
		want  string
	}{
		{"400 MiB of arrival times past the header's 300", append(append([]byte{}, header...), append([]byte{'\n'}, state[:arrivalsAt]...)...), "0.5,",
			[]byte("0.5]}\n"), "more arrival times than the header's 300 first turns"},
		{"400 MiB of one statistic", append(append([]byte{}, header...), append([]byte{'\n'}, state[:prefixAt]...)...), " ",
			state[prefixAt:], "decompressed past its limit: statistics of more than 8388608 bytes"},
		{"a header line of 400 MiB", []byte(`{"format":"servetrace-fit-partial","x":"`), "a", []byte("\"}\n"), "a header line of more than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".fitpart.gz")
			writeBomb(t, path, c.head, c.chunk, 400, c.tail)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err, ok := withinDeadline(t, 2*time.Minute, func() error { _, err := readPartial(path); return err })
			runtime.ReadMemStats(&after)
			if !ok {
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v; want one naming %s and saying %q", err, path, c.want)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("reading allocated %d MB; the limits should stop it within tens", grew>>20)
			}
		})
	}
	t.Run("a header saying more first turns than rows", func(t *testing.T) {
		lie := bytes.Replace(header, []byte(fmt.Sprintf(`"first_turns":%d`, h.FirstTurns)), []byte(`"first_turns":1000000000`), 1)
		path := filepath.Join(dir, "lie.fitpart.gz")
		writeGzipLines(t, path, lie, state)
		if _, err := readPartial(path); err == nil || !strings.Contains(err.Error(), "1000000000 first turns") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("a merge of more first turns than it holds", func(t *testing.T) {
		defer func(old int64) { maxMergedFirstTurns = old }(maxMergedFirstTurns)
		maxMergedFirstTurns = h.FirstTurns - 1
		_, err := FitMerged(context.Background(), []string{good}, FitOptions{})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d first turns in all, more than the %d a merge holds", h.FirstTurns, h.FirstTurns-1)) {
			t.Errorf("error %v", err)
		}
	})
	if _, err := readPartial(good); err != nil {
		t.Errorf("the partial servetrace wrote: %v", err)
	}
}

// TestLongReadPartialRefusesBombsWithin1GiB (issue 46, 13): with the
// limits as shipped, each hostile partial (a gzip stream of a few MB whose
// statistics inflate to a gigabyte or more) is refused, naming what it
// passed, within 1 GiB of address space: whitespace, a long string, an
// unknown key holding a long array, a long column of prefix groups, a
// mix count of many values, deep nesting. Before, encoding/json buffered
// each statistic whole within the 1 GiB text budget and decoded it, and
// the red team's 11 MB partial took 3.1 GB before its refusal.
func TestLongReadPartialRefusesBombsWithin1GiB(t *testing.T) {
	_, header, state := smallPartial(t)
	prefixAt := bytes.Index(state, []byte(`"prefix":`))
	groupsAt := bytes.Index(state, []byte(`"first_block":[`)) + len(`"first_block":[`)
	mixAt := bytes.Index(state, []byte(`"mix":{"model":{"total":{`)) + len(`"mix":{"model":{"total":{`)
	if prefixAt < 0 || groupsAt < len(`"first_block":[`) || mixAt < len(`"mix":{"model":{"total":{`) {
		t.Fatalf("the statistics line changed shape: %.300s", state)
	}
	head := func(at int) []byte { return append(append(append([]byte{}, header...), '\n'), state[:at]...) }
	dir := t.TempDir()
	type bomb struct {
		name   string
		head   []byte
		chunk  string
		chunks int
		tail   []byte
		want   string
	}
	bombs := []bomb{
		{"whitespace", head(prefixAt), " ", 1100, state[prefixAt:], "statistics of more than"},
		{"a long string", head(prefixAt), "a", 1100, nil, "a string of more than"},
		{"an unknown key's long array", append(head(prefixAt), `"x":[`...), "0,", 1100, nil, "more than"},
		{"a long column of prefix groups", head(groupsAt), "1,", 1100, nil, "more than"},
		{"a mix value counted again and again", head(mixAt), `"m":1,`, 1100, nil, "more than"},
		{"deep nesting", append(head(prefixAt), `"x":`...), "[", 1100, nil, "nested deeper than"},
	}
	bombs[1].head = append(bombs[1].head, `"x":"`...)
	for _, b := range bombs {
		path := filepath.Join(dir, strings.ReplaceAll(b.name, " ", "-")+".fitpart.gz")
		writeBomb(t, path, b.head, b.chunk, b.chunks, b.tail)
	}
	memcap.Run(t, 1<<30, func(t *testing.T) {
		for _, b := range bombs {
			path := filepath.Join(dir, strings.ReplaceAll(b.name, " ", "-")+".fitpart.gz")
			t0 := time.Now()
			_, err := readPartial(path)
			t.Logf("%s: refused in %v: %v", b.name, time.Since(t0).Round(time.Millisecond), err)
			if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: error %v; want one naming %s and saying %q", b.name, err, path, b.want)
			}
		}
		t.Logf("peak resident memory %d MiB", procstat.PeakRSS()>>20)
	})
}
