package datasets

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// ErrNotData marks an input that is not the data itself: a Git LFS pointer
// left where the file should be, or a compressed file Read does not
// decompress (xz, zip). Its message says what the file is and how to get
// the data out.
var ErrNotData = errors.New("not the data itself")

// compression is a compressed or archive format known by its magic bytes.
type compression struct {
	name  string
	magic func(b []byte) bool
	exts  []string // the names that say so
	// open decompresses; nil for one Read cannot read, whose fix says what to do.
	open func(r io.Reader) (io.ReadCloser, error)
	fix  string
}

// compressions are the formats told apart by magic bytes, whatever the
// file is called: a download renamed or served without its extension
// still reads, and one that cannot is named instead of looking binary.
var compressions = []compression{
	{name: "gzip", magic: prefix("\x1f\x8b"), exts: []string{".gz", ".gzip", ".tgz"},
		open: func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }},
	{name: "zstd", magic: prefix("\x28\xb5\x2f\xfd"), exts: []string{".zst", ".zstd"},
		open: func(r io.Reader) (io.ReadCloser, error) {
			zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxZstdWindow))
			if err != nil {
				return nil, err
			}
			return zr.IOReadCloser(), nil
		}},
	// bzip2: "BZh", the block size digit, then the block magic (pi's digits),
	// so a text file starting "BZh" is not taken for one.
	{name: "bzip2", magic: func(b []byte) bool {
		return len(b) >= 10 && string(b[:3]) == "BZh" && b[3] >= '1' && b[3] <= '9' && (string(b[4:10]) == "1AY&SY" || string(b[4:10]) == "\x17rE8P\x90")
	}, exts: []string{".bz2", ".bzip2"},
		open: func(r io.Reader) (io.ReadCloser, error) { return io.NopCloser(bzip2.NewReader(r)), nil }},
	{name: "xz", magic: prefix("\xfd7zXZ\x00"), exts: []string{".xz", ".txz"},
		fix: "decompress it first (xz -d, or unxz), or recompress it with gzip or zstd, which are read as they are"},
	{name: "zip", magic: prefix("PK\x03\x04"), exts: []string{".zip"},
		fix: "unzip it and convert the files inside"},
}

// maxZstdWindow bounds a zstd layer's window, the history its decoder
// holds: zstd -d's own default limit, which every level up to --ultra -22
// and --long=27 stays within. A stream that declares a larger window is
// refused before the window is allocated, so three layers hold at most
// three such windows.
const maxZstdWindow = 128 << 20

func prefix(p string) func([]byte) bool {
	return func(b []byte) bool { return bytes.HasPrefix(b, []byte(p)) }
}

// sniffCompression returns the compression b starts with, or nil.
func sniffCompression(b []byte) *compression {
	for i := range compressions {
		if compressions[i].magic(b) {
			return &compressions[i]
		}
	}
	return nil
}

// named says how a compressed input's name relates to its content, for
// errors: a file whose name does not say it is compressed is where a user
// looks last.
func (c *compression) named(name string) string {
	if name == "" || name == "stdin" {
		return ""
	}
	low := strings.ToLower(name)
	for _, e := range c.exts {
		if strings.HasSuffix(low, e) {
			return ""
		}
	}
	return " (its name does not say so)"
}

// decompress reads r through a 1 MiB buffer and unwraps the gzip, zstd
// or bzip2 layers it starts with (up to three: a file compressed twice
// reads too), recognised by magic bytes rather than by name. A
// decompression error on the way names the layer. Every read, of r and of
// each layer, fails once ctx ends (ctxReader). The returned func closes
// the decompressors; call it even on error.
func decompress(ctx context.Context, r io.Reader, name string) (*bufio.Reader, func(), error) {
	br := bufio.NewReaderSize(ctxReader{ctx, r}, 1<<20)
	var closers []io.Closer
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
	}
	for range 3 {
		magic, _ := br.Peek(10)
		c := sniffCompression(magic)
		if c == nil || c.open == nil {
			break
		}
		what := fmt.Sprintf("%s: %s-compressed input%s", name, c.name, c.named(name))
		zr, err := c.open(br)
		if err != nil {
			return br, closeAll, fmt.Errorf("%s does not decompress: %w", what, err)
		}
		closers = append(closers, zr)
		br = bufio.NewReaderSize(ctxReader{ctx, layerReader{zr, what}}, 1<<20)
	}
	return br, closeAll, nil
}

// ctxReader fails its reads once ctx ends. Each format's reader skips
// blank lines and whitespace in loops of its own, which an endless run of
// them (a decompression bomb of newlines) would keep busy; checked where
// the input is read, the context stops every one of them within a
// buffer (1 MiB) of input.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// layerReader names its decompression layer in the errors it returns, so
// a truncated or corrupt stream is not reported as a bad line.
type layerReader struct {
	r    io.Reader
	what string
}

func (l layerReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	switch {
	case err == nil || err == io.EOF:
	case errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded):
		err = fmt.Errorf("%s needs a window of more than %d MiB to decompress (made in zstd's long mode, 28 or more?): decompress it first with zstd -d, its long-window option set to 31, then convert the result: %w", l.what, maxZstdWindow>>20, err)
	default:
		err = fmt.Errorf("%s: %w (truncated or corrupt?)", l.what, err)
	}
	return n, err
}

// peekHead returns the input's start without consuming it: as much as the
// reader's buffer holds, and whether that is the whole input.
func peekHead(br *bufio.Reader) (head []byte, complete bool, err error) {
	b, err := br.Peek(br.Size())
	switch {
	case err == nil || errors.Is(err, bufio.ErrBufferFull):
		return b, false, nil
	case err == io.EOF:
		return b, true, nil
	}
	return nil, false, fmt.Errorf("read: %w", err)
}

// lfsPointerLine is the first line of every Git LFS pointer file
// (github.com/git-lfs/git-lfs/blob/main/docs/spec.md).
const lfsPointerLine = "version https://git-lfs.github.com/spec/v1"

// notData returns an ErrNotData error when head is a Git LFS pointer or a
// compressed file that is not decompressed here: read as data, either
// would be rejected line by line, or fail as "binary" or with one column,
// with nothing saying why.
func notData(head []byte, name string) error {
	if c := sniffCompression(head); c != nil && c.open == nil {
		return fmt.Errorf("%w: the input is %s-compressed%s: %s", ErrNotData, c.name, c.named(name), c.fix)
	}
	b := bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	if !bytes.HasPrefix(b, []byte(lfsPointerLine)) {
		return nil
	}
	// The pointer's size and oid say which file it stands for; both are
	// checked to be what the spec allows, so nothing else is quoted.
	var size, oid string
	for _, l := range strings.Split(string(b[:min(len(b), 1024)]), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "size "); ok && v != "" && strings.Trim(v, "0123456789") == "" {
			size = v
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "oid sha256:"); ok && len(v) == 64 && strings.Trim(v, "0123456789abcdef") == "" {
			oid = v[:12]
		}
	}
	what := "a Git LFS pointer"
	if size != "" && oid != "" {
		what = fmt.Sprintf("a Git LFS pointer (to %s bytes, sha256 %s…)", size, oid)
	}
	return fmt.Errorf("%w: the input is %s, not the file it stands for: run 'git lfs pull' in the repository it came from, or download the real file", ErrNotData, what)
}
