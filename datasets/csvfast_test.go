package datasets

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// csvReadings reads src to its end, recording each record with its line
// and each error (a parse error with its lines), as eachCSVRecord sees them.
func csvReadings(src csvSource) []string {
	var out []string
	for range 10_000 {
		rec, err := src.Read()
		var pe *csv.ParseError
		switch {
		case err == io.EOF:
			return append(out, "EOF")
		case errors.As(err, &pe):
			out = append(out, fmt.Sprintf("parse error lines %d-%d: %v", pe.StartLine, pe.Line, pe.Err))
		case err != nil:
			return append(out, "error "+err.Error())
		default:
			line, _ := src.FieldPos(0)
			out = append(out, fmt.Sprintf("line %d: %q", line, rec))
		}
	}
	return out
}

// TestFastCSVMatchesEncodingCSV reads random CSV, with quotes (good and
// bad), \r\n and bare \r, empty lines, no final newline and lines longer
// than the read buffer, through fastCSV and through encoding/csv: the
// records, their lines and the parse errors must be the same.
func TestFastCSVMatchesEncodingCSV(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	cases := []string{"", "\n", "a,b\n1,2\n", "a,b\r\n1,2\r\n\r\n3,4", "a,,\n,\n\n,x\r", "x\n\"q\",1\n2,3\n", "a\"b,1\nc,d\n", "t\n\"open\n2,3\n",
		strings.Repeat("long,", 100) + "\n1,2\n"}
	for range 20_000 {
		var b strings.Builder
		for range rng.IntN(120) {
			const alphabet = "aa11,,,\n\n\r\" "
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, in := range cases {
		for _, size := range []int{16, 4096} {
			want := func() []string {
				cr := csv.NewReader(bufio.NewReaderSize(strings.NewReader(in), size))
				cr.ReuseRecord, cr.FieldsPerRecord = true, -1
				return csvReadings(cr)
			}()
			got := csvReadings(newFastCSV(bufio.NewReaderSize(strings.NewReader(in), size)))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("input %q (buffer %d):\nfast     %q\nencoding %q", in, size, got, want)
			}
		}
	}
}
