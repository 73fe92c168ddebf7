package datasets

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"strings"
)

// csvSource is what the CSV readers take from encoding/csv's Reader.
type csvSource interface {
	Read() ([]string, error)
	FieldPos(field int) (line, column int)
}

// fastCSV reads comma-separated records as an encoding/csv Reader with
// ReuseRecord and FieldsPerRecord -1 does, but splits a line without a
// double quote itself: the general reader's state machine cost as much as
// the rest of converting an Azure row. From the first line that holds a
// quote on, the rest of the input, that line included, goes through
// encoding/csv, whose line numbers (in records and in errors) are carried
// on from the lines already read. TestFastCSVMatchesEncodingCSV holds the
// two to the same records.
type fastCSV struct {
	br      *bufio.Reader
	lines   int // lines read by the fast path
	recLine int // the line of the last record
	rec     []string
	raw     []byte
	strs    stringArena
	slow    *boundedCSV
}

func newFastCSV(br *bufio.Reader) *fastCSV { return &fastCSV{br: br} }

// Read returns the next record; the slice is reused by the next call.
func (c *fastCSV) Read() ([]string, error) {
	if c.slow != nil {
		return c.readSlow()
	}
	for {
		line, err := c.readLine()
		if err == errLineTooLong {
			c.lines++
			return nil, &csv.ParseError{StartLine: c.lines, Line: c.lines, Err: err}
		}
		if len(line) == 0 || err != nil && err != io.EOF {
			return nil, err // io.EOF once no line is left
		}
		c.lines++
		if bytes.IndexByte(line, '"') >= 0 {
			c.slow = newBoundedCSV(io.MultiReader(bytes.NewReader(bytes.Clone(line)), c.br))
			c.slow.ReuseRecord, c.slow.FieldsPerRecord = true, -1
			c.lines--
			c.slow.lineBase = c.lines
			return c.readSlow()
		}
		// As encoding/csv: a \r at the end of the input dropped, \r\n as \n.
		if err == io.EOF {
			line = bytes.TrimSuffix(line, []byte{'\r'})
		} else {
			line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		}
		if len(line) == 0 {
			continue // encoding/csv skips empty lines
		}
		s := c.strs.string(line)
		c.rec = c.rec[:0]
		for {
			i := strings.IndexByte(s, ',')
			if i < 0 {
				break
			}
			c.rec = append(c.rec, s[:i])
			s = s[i+1:]
		}
		c.rec = append(c.rec, s)
		c.recLine = c.lines
		return c.rec, nil
	}
}

// readLine reads a line as it is, its \n included; err is io.EOF with
// the input's last line if that has no \n, or errLineTooLong for a line
// of more than MaxLineBytes, read past whole.
func (c *fastCSV) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		c.raw = append(c.raw[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = c.br.ReadSlice('\n')
			if len(c.raw)+len(line) > MaxLineBytes {
				c.raw = c.raw[:0]
				for err == bufio.ErrBufferFull {
					_, err = c.br.ReadSlice('\n')
				}
				if err == nil || err == io.EOF {
					err = errLineTooLong
				}
				return nil, err
			}
			c.raw = append(c.raw, line...)
		}
		line = c.raw
	}
	return line, err
}

// readSlow reads a record through encoding/csv, its line numbers moved on
// by the lines read before it took over.
func (c *fastCSV) readSlow() ([]string, error) {
	rec, err := c.slow.Read()
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		pe.StartLine += c.lines
		pe.Line += c.lines
	}
	if err == nil {
		line, _ := c.slow.FieldPos(0)
		c.recLine = line + c.lines
	}
	return rec, err
}

// FieldPos returns the line of the last record read (the column is not
// kept: no caller uses it).
func (c *fastCSV) FieldPos(int) (line, column int) { return c.recLine, 0 }
