package datasets

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// errElementTooLong marks a JSON array element longer than MaxLineBytes.
var errElementTooLong = fmt.Errorf("conversation longer than %d MiB", MaxLineBytes>>20)

// arrayElements streams the elements of the JSON array br holds (its '['
// not yet read) to fn, one at a time, each at most MaxLineBytes: a longer
// element is skipped as it streams, never held, and fn gets
// errElementTooLong for it, so one huge element costs neither memory nor
// the elements after it. It tracks only nesting and strings; fn decodes.
func arrayElements(br *bufio.Reader, fn func(elem []byte, n int64, err error) error) error {
	if err := skipSpace(br); err != nil {
		return err
	}
	if c, err := br.ReadByte(); err != nil || c != '[' {
		return errors.New("not a JSON array")
	}
	var buf []byte
	for n := int64(1); ; n++ {
		if err := skipSpace(br); err != nil {
			return fmt.Errorf("element %d: the array is cut short: %w", n, err)
		}
		c, _ := br.ReadByte()
		if c == ']' {
			return nil
		}
		br.UnreadByte()
		buf = buf[:0]
		tooLong := false
		keep := func(b byte) {
			if tooLong {
				return
			}
			if len(buf) == MaxLineBytes {
				tooLong, buf = true, buf[:0]
				return
			}
			buf = append(buf, b)
		}
		depth, inString, escaped := 0, false, false
		for {
			b, err := br.ReadByte()
			if err != nil {
				return fmt.Errorf("element %d: the array is cut short: %w", n, io.ErrUnexpectedEOF)
			}
			if inString {
				keep(b)
				switch {
				case escaped:
					escaped = false
				case b == '\\':
					escaped = true
				case b == '"':
					inString = false
				}
				continue
			}
			if depth == 0 && (b == ',' || b == ']') {
				if b == ']' {
					br.UnreadByte()
				}
				break
			}
			keep(b)
			switch b {
			case '"':
				inString = true
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth < 0 {
					return fmt.Errorf("element %d: unbalanced brackets: the array is corrupt", n)
				}
			}
		}
		var err error
		if tooLong {
			err = errElementTooLong
		}
		if err := fn(buf, n, err); err != nil {
			return err
		}
	}
}

// skipSpace consumes JSON whitespace.
func skipSpace(br *bufio.Reader) error {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return br.UnreadByte()
		}
	}
}
