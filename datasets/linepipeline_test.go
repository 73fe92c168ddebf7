package datasets

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// longLines is a log of n lines of size bytes each ('{' then 'x's: JSON
// that fails at its second byte, so preparing one costs next to nothing),
// made as it is read.
type longLines struct {
	line     []byte
	n, given int
	off      int
}

func newLongLines(n, size int) *longLines {
	line := bytes.Repeat([]byte{'x'}, size)
	line[0], line[size-1] = '{', '\n'
	return &longLines{line: line, n: n}
}

func (l *longLines) Read(p []byte) (int, error) {
	if l.given == l.n {
		return 0, io.EOF
	}
	k := copy(p, l.line[l.off:])
	if l.off += k; l.off == len(l.line) {
		l.off, l.given = 0, l.given+1
	}
	return k, nil
}

// TestLongLinePipelineBytesInFlight (issue 46, round 4, item 3): 64
// lines of 15 MiB go through the request-log pipeline on 2 workers
// within 512 MiB: a batch closes at 8 MiB as well as at 128 lines, and
// the reader holds at most 2×2+1 batches, so about 5 lines of 15 MiB are
// in flight, not a batch of 128 (1.9 GiB).
func TestLongLinePipelineBytesInFlight(t *testing.T) {
	memcap.Run(t, 512<<20, func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		const lines = 64
		var sink memSink
		st, err := Read(context.Background(), newLongLines(lines, 15<<20), Options{Name: "long.jsonl", Format: FormatOpenAILog, Log: LogOptions{Salt: testSalt(t)}}, &sink)
		if err != nil || st.Rejects != lines || len(sink.rejects) != lines {
			t.Fatalf("%d rejects (%d at the sink), error %v; want all %d lines rejected as malformed", st.Rejects, len(sink.rejects), err, lines)
		}
		for i, r := range sink.rejects {
			if r.Line != int64(i+1) || !strings.Contains(r.Reason, "malformed JSON") {
				t.Fatalf("reject %d: line %d, %q; want line %d, malformed JSON", i, r.Line, r.Reason, i+1)
			}
		}
	})
}

// countedLines is a record source of n short lines that counts how many
// it has given.
type countedLines struct {
	n, given int
	atEnd    func()
}

func (c *countedLines) next() ([]byte, int64, error) {
	if c.given == c.n {
		c.atEnd()
		return nil, int64(c.given), io.EOF
	}
	c.given++
	return []byte("{}"), int64(c.given), nil
}

// TestLongLinePipelineHoldsFewBatches (issue 46, round 4, item 3, the
// order window): while the first line is still being prepared, the
// reader must not run ahead: every other batch, prepared, would wait for
// it in the emitter. The first line's preparation waits until the reader
// waits for room (or, were it never to, the input ends); each prepared
// line carries 1 KiB, so a million lines held would need 1 GiB, more than
// the 256 MiB cap. Before, the emitter took in every batch that came and
// the reader ran to the end of the input.
func TestLongLinePipelineHoldsFewBatches(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		const n = 1_000_000
		release := make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		p := linePipeline{name: "held.jsonl", workers: 2, full: free,
			prepare: func(raw []byte, lineNo int64) (prepared, error) {
				if lineNo == 1 {
					<-release
				}
				return prepared{texts: make([]sessionKey, 64)}, nil
			}}
		next := int64(1)
		err := p.run(context.Background(), &countedLines{n: n, atEnd: free}, func(l logLine) error {
			if l.lineNo != next || len(l.p.texts) != 64 {
				t.Fatalf("line %d came as line %d", next, l.lineNo)
			}
			next++
			return nil
		})
		if err != nil || next != n+1 {
			t.Fatalf("emitted %d lines, error %v; want all %d in order", next-1, err, n)
		}
	})
}

// sizedLines is a record source of lines of the given sizes.
type sizedLines struct {
	sizes []int
	n     int
}

func (s *sizedLines) next() ([]byte, int64, error) {
	if s.n == len(s.sizes) {
		return nil, int64(s.n), io.EOF
	}
	s.n++
	return make([]byte, s.sizes[s.n-1]), int64(s.n), nil
}

// TestBatchesCloseAtLinesOrBytes: a batch closes at 128 lines, or before
// a line that would take it past 8 MiB; a longer line is a batch alone.
func TestBatchesCloseAtLinesOrBytes(t *testing.T) {
	const mib = 1 << 20
	repeat := func(n, size int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = size
		}
		return out
	}
	cases := []struct {
		name  string
		sizes []int
		want  []int // lines per batch
	}{
		{"short lines: 128 a batch", repeat(300, 10), []int{128, 128, 44}},
		{"3 MiB lines: two a batch", repeat(5, 3*mib), []int{2, 2, 1}},
		{"exactly 8 MiB fits", []int{4 * mib, 4 * mib, 1}, []int{2, 1}},
		{"a 15 MiB line alone", []int{10, 15 * mib, 10, 10}, []int{1, 1, 2}},
		{"two long lines", []int{15 * mib, 16 * mib}, []int{1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			todo := make(chan logBatch, len(c.sizes))
			slots := make(chan struct{}, len(c.sizes))
			err := linePipeline{name: "x"}.readBatches(context.Background(), &sizedLines{sizes: c.sizes}, slots, todo)
			close(todo)
			var got []int
			for b := range todo {
				got = append(got, len(b.lines))
				if b.seq != len(got)-1 {
					t.Errorf("batch %d numbered %d", len(got)-1, b.seq)
				}
			}
			if err != nil || !slices.Equal(got, c.want) || len(slots) != len(got) {
				t.Errorf("batches of %v lines (%d slots taken), error %v; want %v", got, len(slots), err, c.want)
			}
		})
	}
}
