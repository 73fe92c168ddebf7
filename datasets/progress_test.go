package datasets

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedReader gives r's first n bytes, then waits for open to close
// before giving the rest.
type gatedReader struct {
	r    io.Reader
	n    int
	open <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.n <= 0 {
		<-g.open
		return g.r.Read(p)
	}
	k, err := g.r.Read(p[:min(len(p), g.n)])
	g.n -= k
	return k, err
}

// TestConvertReportsProgress (issue 46, round 4, item 6): a conversion
// reports, while it reads, how far it is in its input: the bytes read of
// the file's size, and the rows and rejects so far. The input stops
// half-way until a report has come, so one must come while it is read.
func TestConvertReportsProgress(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	for i := range 20_000 {
		if i == 10 {
			b.WriteString("2024-05-10 00:00:01,x,1\n") // a reject
			continue
		}
		b.WriteString("2024-05-10 00:00:01,100,5\n")
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	size := int64(b.Len())
	seen := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var got []Progress
	opts := ConvertOptions{
		ProgressEvery: time.Millisecond,
		Progress: func(p Progress) {
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
			once.Do(func() { close(seen) })
		},
	}
	opts.open = func(f io.Reader) io.Reader { return &gatedReader{r: f, n: int(size / 2), open: seen} }
	if _, err := Convert(context.Background(), []string{in}, filepath.Join(dir, "out"), opts); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("no progress reported")
	}
	p := got[0]
	if p.Input != in || p.Stage != "converting" || p.Size != size || p.Read <= 0 || p.Read > size/2 || p.Rows > 20_000 || p.Rejects > 1 {
		t.Errorf("first report %+v; want %s converting, at most half of %d bytes read", p, in, size)
	}
	last := got[len(got)-1]
	if last.Read < p.Read || last.Rows < p.Rows {
		t.Errorf("reports went back: %+v after %+v", last, p)
	}
}
