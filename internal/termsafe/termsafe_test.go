package termsafe

import (
	"bytes"
	"testing"
)

func TestWriterEscapesControls(t *testing.T) {
	for _, c := range []struct {
		in   []string // written in this many calls
		want string
	}{
		{[]string{"model\x1b[31mred\x1b[0m\n"}, `model\x1b[31mred\x1b[0m` + "\n"},
		{[]string{"a\tb\r\n"}, "a\tb\r\n"}, // layout characters pass
		{[]string{"nul\x00 bell\x07 del\x7f"}, `nul\x00 bell\x07 del\x7f`},
		{[]string{"csi \xc2\x9b2J"}, `csi \u009b2J`}, // C1 CSI in UTF-8
		{[]string{"split \xc2", "\x9b2J"}, `split \u009b2J`},
		{[]string{"é ü ½ \xc2", "\xa0"}, "é ü ½ \xc2\xa0"}, // other UTF-8 untouched
	} {
		var out bytes.Buffer
		w := Writer(&out)
		for _, s := range c.in {
			if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
				t.Fatalf("Write(%q) = %d, %v", s, n, err)
			}
		}
		if out.String() != c.want {
			t.Errorf("%q: wrote %q, want %q", c.in, out.String(), c.want)
		}
	}
}
