// Package termsafe keeps text read from files and servers from driving the
// terminal it is printed to: control characters other than newline, tab
// and carriage return become visible escapes (ESC is printed as \x1b), so a
// model name or a file name cannot move the cursor, recolour the screen or
// rewrite what was printed before.
package termsafe

import (
	"fmt"
	"io"
)

// Writer wraps w so that every control character but '\n', '\t' and '\r'
// is written as a \xHH escape: C0 controls, DEL, and the C1 controls
// U+0080..U+009F (UTF-8 0xC2 0x80..0x9F, which some terminals read as
// escape sequences too).
func Writer(w io.Writer) io.Writer { return &writer{w: w} }

type writer struct {
	w       io.Writer
	pending bool // the last write ended in 0xC2, which may start a C1 control
	buf     []byte
}

func (t *writer) Write(p []byte) (int, error) {
	t.buf = t.buf[:0]
	i := 0
	if t.pending {
		t.pending = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] <= 0x9f {
			t.buf = fmt.Appendf(t.buf, `\u%04x`, p[0])
			i = 1
		} else {
			t.buf = append(t.buf, 0xc2)
		}
	}
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\n' || c == '\t' || c == '\r':
			t.buf = append(t.buf, c)
		case c < 0x20 || c == 0x7f:
			t.buf = fmt.Appendf(t.buf, `\x%02x`, c)
		case c == 0xc2 && i+1 == len(p):
			t.pending = true // decided by the next write
		case c == 0xc2 && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			t.buf = fmt.Appendf(t.buf, `\u%04x`, p[i+1])
			i++
		default:
			t.buf = append(t.buf, c)
		}
	}
	if _, err := t.w.Write(t.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}
