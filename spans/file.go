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
// MaxMessageBytes). A .gz file is inflated. A line over MaxMessageBytes,
// or one that is not an export, is an error naming the line; the lines
// before it have been given to c.
func ReadFile(path string, c *Collector) error {
	src, closeFile, err := openSpans(path)
	if err != nil {
		return err
	}
	defer closeFile()
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 0, 64<<10), MaxMessageBytes)
	line, exports := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := c.addJSON(b); err != nil {
			if exports == 0 {
				return readDocument(path, c)
			}
			return fmt.Errorf("read spans %s:%d: not an OTLP/JSON trace export (one {\"resourceSpans\": [...]} per line, as the collector's file exporter writes): %v", path, line, err)
		}
		exports++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("read spans %s:%d: a line over %d MiB, the most one export may hold", path, line+1, MaxMessageBytes>>20)
		}
		return fmt.Errorf("read spans %s: %w", path, err)
	}
	return nil
}

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
	if err := c.addJSON(b); err != nil {
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
		zr, err := gzip.NewReader(src)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("read spans %s: %w", path, err)
		}
		src = zr
	}
	return src, func() { f.Close() }, nil
}
