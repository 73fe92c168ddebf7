package spans

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/servetrace/servetrace/internal/regfile"
)

// ReadFile gives c the spans of an OTLP/JSON file: the OpenTelemetry
// Collector's file exporter writes one ExportTraceServiceRequest per line
// ({"resourceSpans": [...]}); a file whose first line is not a whole
// export is read as one document over many lines (at most
// MaxMessageBytes). A .gz file is inflated, at most maxInflateRatio times
// its size past the first inflateAllowance bytes. A line over
// MaxMessageBytes, one that is not an export, or the export past
// maxEmptyExports that holds no span, is an error naming the line; the
// lines before it have been given to c.
func ReadFile(path string, c *Collector) error {
	src, closeFile, err := openSpans(path)
	if err != nil {
		return err
	}
	defer closeFile()
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 0, 64<<10), MaxMessageBytes)
	line, exports, empty := 0, 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if exports == 0 && walkJSON(b, func(*spanRecord) {}) != nil {
			return readDocument(path, c)
		}
		n, err := c.addJSON(b)
		if err != nil {
			return fmt.Errorf("read spans %s:%d: not an OTLP/JSON trace export (one {\"resourceSpans\": [...]} per line, as the collector's file exporter writes): %v", path, line, err)
		}
		exports++
		if n == 0 {
			if empty++; empty > maxEmptyExports {
				return fmt.Errorf("read spans %s:%d: more than %d exports without a span, which a collector never writes: not a span export", path, line, maxEmptyExports)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("read spans %s:%d: a line over %d MiB, the most one export may hold", path, line+1, MaxMessageBytes>>20)
		}
		return fmt.Errorf("read spans %s: %w", path, err)
	}
	return nil
}

// maxEmptyExports bounds the exports without a span a file may hold: the
// collector writes an export per batch of spans, never an empty one, and
// a file of millions of "{}" lines costs seconds each million to read.
const maxEmptyExports = 1 << 16

// A gzip file may inflate to inflateAllowance bytes, and past that to at
// most maxInflateRatio times the compressed bytes read: span exports,
// full of random ids, inflate ten- to thirty-fold, and a file that
// inflates a thousand-fold is a compression bomb (58 KB of gzip holds
// twenty million empty lines).
const (
	inflateAllowance = 1 << 20
	maxInflateRatio  = 256
)

// readDocument reads the whole file as one export.
func readDocument(path string, c *Collector) error {
	src, closeFile, err := openSpans(path)
	if err != nil {
		return err
	}
	defer closeFile()
	b, err := io.ReadAll(io.LimitReader(src, MaxMessageBytes+1))
	if err != nil {
		return fmt.Errorf("read spans %s: %w", path, err)
	}
	if len(b) > MaxMessageBytes {
		return fmt.Errorf("read spans %s: line 1 is not a whole export, and the file is over %d MiB, the most one export may hold: write one export per line", path, MaxMessageBytes>>20)
	}
	if _, err := c.addJSON(b); err != nil {
		return fmt.Errorf("read spans %s: not an OTLP/JSON trace export ({\"resourceSpans\": [...]}, one per line as the collector's file exporter writes): %v", path, err)
	}
	return nil
}

// openSpans opens a regular file, inflating it if its name ends in .gz.
func openSpans(path string) (io.Reader, func(), error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read spans: %w", err)
	}
	var src io.Reader = bufio.NewReader(f)
	if strings.HasSuffix(path, ".gz") {
		compressed := &countingReader{r: src}
		zr, err := gzip.NewReader(compressed)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("read spans %s: %w", path, err)
		}
		src = &bombGuard{path: path, r: zr, compressed: compressed}
	}
	return src, func() { f.Close() }, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// bombGuard fails a gzip stream that inflates past inflateAllowance and
// maxInflateRatio times the compressed bytes read so far.
type bombGuard struct {
	path       string
	r          io.Reader
	compressed *countingReader
	inflated   int64
}

func (g *bombGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.inflated += int64(n)
	if g.inflated > inflateAllowance && g.inflated > maxInflateRatio*g.compressed.n {
		return n, fmt.Errorf("%s inflates more than %d-fold (%d MiB from %d KiB), as no span export does: a compression bomb? inflate it yourself if it is not one", g.path, maxInflateRatio, g.inflated>>20, g.compressed.n>>10)
	}
	return n, err
}
