package datasets

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// zstdRLE is a zstd frame, made as it is read, that declares a window of
// 2^windowLog bytes and decodes to n copies of b (n < 0: without end), in
// RLE blocks of 128 KiB (RFC 8878: a block header of 3 bytes, then the
// byte repeated): 4 bytes of input for each 128 KiB of output.
type zstdRLE struct {
	b    byte
	n    int64
	head []byte
	buf  []byte
}

func newZstdRLE(windowLog int, b byte, n int64) *zstdRLE {
	// Magic, a frame header descriptor of 0 (no checksum, no content
	// size, not single-segment) and the window descriptor: exponent
	// windowLog-10, mantissa 0.
	return &zstdRLE{b: b, n: n, head: []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}}
}

func (z *zstdRLE) Read(p []byte) (int, error) {
	if len(z.head) > 0 {
		k := copy(p, z.head)
		z.head = z.head[k:]
		return k, nil
	}
	for len(z.buf) < len(p) && z.n != 0 {
		size := int64(128 << 10)
		if z.n > 0 {
			size = min(size, z.n)
			z.n -= size
		}
		h := uint32(1<<1 | size<<3) // block type 1: RLE
		if z.n == 0 {
			h |= 1 // the last block
		}
		z.buf = append(z.buf, byte(h), byte(h>>8), byte(h>>16), z.b)
	}
	if len(z.buf) == 0 {
		return 0, io.EOF
	}
	k := copy(p, z.buf)
	z.buf = z.buf[k:]
	return k, nil
}

// TestZstdWindowIsBounded (issue 46, round 4, item 6): a zstd layer whose
// window is over 128 MiB (zstd -d's own default limit) fails, naming the
// file and what to do, before it holds that window; up to 128 MiB reads.
// Before, a window of up to 512 MiB a layer was taken.
func TestZstdWindowIsBounded(t *testing.T) {
	const csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.125,100,5\n"
	for _, c := range []struct {
		name      string
		windowLog int
		ok        bool
	}{
		{"8 MiB (zstd -19)", 23, true},
		{"128 MiB (zstd --long=27, --ultra -22)", 27, true},
		{"256 MiB", 28, false},
		{"2 GiB (zstd --long=31)", 31, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The frame's header, then the CSV in a raw block (type 0), the last.
			frame := newZstdRLE(c.windowLog, 0, 0).head
			h := uint32(len(csv)<<3 | 1)
			frame = append(frame, byte(h), byte(h>>8), byte(h>>16))
			frame = append(frame, csv...)
			var sink memSink
			st, err := Read(context.Background(), strings.NewReader(string(frame)), Options{Name: "wide.csv.zst"}, &sink)
			if c.ok {
				if err != nil || st.Rows != 1 {
					t.Fatalf("%d rows, error %v; want the one row", st.Rows, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "wide.csv.zst") || !strings.Contains(err.Error(), "window") || !strings.Contains(err.Error(), "128 MiB") || !strings.Contains(err.Error(), "zstd -d") {
				t.Fatalf("error %v; want one naming the file, its window over 128 MiB and zstd -d", err)
			}
		})
	}
}

// TestLongZstdWindowHeldIsBounded (item 6): a zstd layer declaring a
// 512 MiB window over 600 MiB of newlines is refused within 256 MiB.
// Before, the decoder took the window and held it.
func TestLongZstdWindowHeldIsBounded(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		var sink memSink
		_, err := Read(context.Background(), newZstdRLE(29, '\n', 600<<20), Options{Name: "wide.jsonl.zst", Format: FormatMooncake}, &sink)
		if err == nil || !strings.Contains(err.Error(), "window") {
			t.Fatalf("error %v; want the window refused", err)
		}
	})
}

// cancelAfter cancels a context once n bytes have been read through it.
type cancelAfter struct {
	r      io.Reader
	n      int64
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	if c.n -= int64(k); c.n <= 0 {
		c.cancel()
	}
	return k, err
}

// endless reads b forever.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

// TestBlankBombsStopWhenCancelled (item 6): an endless run of blank
// lines, plain or out of a zstd layer, is read in linear time and stops
// when the context is cancelled, whatever the format: every reader skips
// blank lines, so the context is checked below them, where the input is
// read. Before, the CSV readers' header, the JSON document and array
// scanners and the JSONL record loop skipped blank lines without looking
// up, and never returned.
func TestBlankBombsStopWhenCancelled(t *testing.T) {
	formats := []string{FormatAzure, FormatBurstGPT, FormatMooncake, FormatOpenAILog, FormatOpenAIBatch, FormatCSV, FormatOTLP, FormatShareGPT}
	for _, f := range formats {
		for _, layer := range []string{"plain", "zstd"} {
			t.Run(f+"/"+layer, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				// Cancelled after 4 MiB of blank lines, plain or decoded.
				in := &cancelAfter{r: endless('\n'), n: 4 << 20, cancel: cancel}
				if layer == "zstd" {
					in = &cancelAfter{r: newZstdRLE(23, '\n', -1), n: 6 + 4*32, cancel: cancel}
				}
				opts := Options{Name: "bomb", Format: f, Log: LogOptions{Salt: testSalt(t)}}
				if f == FormatCSV {
					opts.Log.Mapping = mustMapping(t, "ts: time\nprompt_tokens: in\n")
				}
				_, err := Read(ctx, in, opts, &memSink{})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("error %v; want context.Canceled", err)
				}
			})
		}
	}
}
