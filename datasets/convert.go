package datasets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// ConvertOptions controls Convert.
type ConvertOptions struct {
	Options
	// Force replaces an existing bucket in the output directory.
	Force bool
}

// Convert reads each input (a bundled dataset's name, a file path, or "-"
// for standard input) and writes one bucket to outDir. On any error nothing
// that could pass for a bucket is left in outDir.
func Convert(ctx context.Context, inputs []string, outDir string, opts ConvertOptions) (*trace.Manifest, error) {
	if len(inputs) == 0 {
		return nil, errors.New("no input given: name a file, '-' for standard input, or a bundled dataset (servetrace datasets list)")
	}
	// Resolve every input before writing anything.
	for _, in := range inputs {
		if in == "-" {
			continue
		}
		if _, ok := Lookup(in); ok {
			continue
		}
		st, err := os.Stat(in)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("input %s: no such file and no bundled dataset of that name (see 'servetrace datasets list')", in)
		}
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in, err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("input %s is a directory; give the log files inside it", in)
		}
	}
	w, err := trace.NewBucketWriter(outDir, trace.WriterOptions{Force: opts.Force})
	if err != nil {
		return nil, err
	}
	m := &trace.Manifest{Kind: "trace", PrefixIDs: trace.PrefixIDsNone}
	for _, in := range inputs {
		src, st, err := convertOne(ctx, in, opts.Options, w)
		if err != nil {
			w.Abort()
			return nil, err
		}
		m.Sources = append(m.Sources, src)
		if st.TimesRelative {
			m.TimesRelative, m.Anchor = true, opts.startOrDefault()
		}
		if st.BlockSize > 0 {
			if m.BlockSize != 0 && m.BlockSize != st.BlockSize {
				w.Abort()
				return nil, fmt.Errorf("input %s uses %d-token prefix blocks, an earlier input %d: convert them into separate buckets", in, st.BlockSize, m.BlockSize)
			}
			m.BlockSize, m.PrefixIDs = st.BlockSize, trace.PrefixIDsSource
		}
	}
	if w.Rows() == 0 {
		rejects := w.Rejects()
		w.Abort()
		return nil, fmt.Errorf("no rows converted from %v (%d lines rejected): check the input's format or pass --format", inputs, rejects)
	}
	if err := w.Close(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (o Options) startOrDefault() time.Time {
	if o.Start.IsZero() {
		return trace.DefaultStart
	}
	return o.Start.UTC()
}

// convertOne reads one input into w and describes it as a manifest source.
func convertOne(ctx context.Context, in string, opts Options, w *trace.BucketWriter) (trace.Source, Stats, error) {
	var r io.Reader
	src := trace.Source{Name: in}
	if d, ok := Lookup(in); ok {
		r = d.Open()
		src.Name, src.Licence, src.Citation = d.Name, d.Licence, d.Citation
		if opts.Format == "" {
			opts.Format = d.Format
		}
	} else if in == "-" {
		r, src.Name = os.Stdin, "stdin"
	} else {
		f, err := os.Open(in)
		if err != nil {
			return src, Stats{}, fmt.Errorf("input %s: %w", in, err)
		}
		defer f.Close()
		r = f
	}
	h := sha256.New()
	opts.Name = src.Name
	st, err := Read(ctx, io.TeeReader(r, h), opts, w)
	if err != nil {
		return src, st, err
	}
	src.SHA256 = hex.EncodeToString(h.Sum(nil))
	src.Format, src.Rows, src.Rejects, src.TimeResolutionUs = st.Format, st.Rows, st.Rejects, st.TimeResolutionUs
	return src, st, nil
}
