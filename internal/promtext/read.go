package promtext

import (
	"strconv"
	"strings"
)

// Sample is one sample line of a text exposition: the metric's name, its
// value, and its label block kept as written, read on demand by Label.
type Sample struct {
	Name  string
	Value float64
	// labels is the label block, braces included (a metric name in it
	// too), checked well formed when the line was read.
	labels string
}

// Label returns the value of the named label, unescaped.
func (s Sample) Label(name string) (string, bool) {
	found, value := false, ""
	scanLabels(s.labels, func(n, v string) {
		if n == name && !found {
			found, value = true, v
		}
	})
	return value, found
}

// Labels returns every label, unescaped.
func (s Sample) Labels() map[string]string {
	out := map[string]string{}
	scanLabels(s.labels, func(n, v string) { out[n] = v })
	return out
}

// Scan reads a text exposition (format 0.0.4, with the quoted UTF-8 names
// Prometheus 3 writes) line by line: each sample line goes to sample, each
// comment line (from its '#') to comment when that is not nil. A line that
// is neither is counted in bad and skipped, so one malformed line costs only
// itself; every exposition expfmt accepts reads the same here.
func Scan(text string, sample func(Sample), comment func(line string)) (bad int) {
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		line = strings.TrimSuffix(line, "\r")
		line = strings.TrimLeft(line, " \t")
		switch {
		case line == "":
		case line[0] == '#':
			if comment != nil {
				comment(line)
			}
		default:
			s, ok := parseSample(line)
			if !ok {
				bad++
				continue
			}
			sample(s)
		}
	}
	return bad
}

// parseSample reads `name{labels} value [timestamp]`: the name bare or
// quoted before the braces, or inside them as an element with no '='.
func parseSample(line string) (Sample, bool) {
	var s Sample
	rest := line
	switch {
	case rest[0] == '"':
		name, n, ok := quoted(rest)
		if !ok || name == "" {
			return s, false
		}
		s.Name, rest = name, rest[n:]
	case rest[0] != '{':
		n := metricNameLen(rest)
		if n == 0 {
			return s, false
		}
		s.Name, rest = rest[:n], rest[n:]
	}
	rest = strings.TrimLeft(rest, " \t")
	if rest != "" && rest[0] == '{' {
		end, inName, ok := scanLabels(rest, nil)
		if !ok || (inName != "" && s.Name != "") {
			return s, false
		}
		if inName != "" {
			s.Name = inName
		}
		s.labels, rest = rest[:end+1], rest[end+1:]
	}
	if s.Name == "" {
		return s, false
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return s, false
	}
	v, ok := parseValue(fields[0])
	if !ok {
		return s, false
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return s, false
		}
	}
	s.Value = v
	return s, true
}

// parseValue reads a sample value as the text format allows: Go's float
// syntax without hexadecimal exponents or digit separators, NaN and ±Inf.
func parseValue(f string) (float64, bool) {
	if strings.ContainsAny(f, "pP_") {
		return 0, false
	}
	v, err := strconv.ParseFloat(f, 64)
	return v, err == nil
}

// metricNameLen is the length of the legacy metric name that starts s
// ([a-zA-Z_:][a-zA-Z0-9_:]*), 0 when s does not start with one.
func metricNameLen(s string) int {
	i := 0
	for i < len(s) && (isNameStart(s[i]) || (i > 0 && s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	return i
}

func isNameStart(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' || b == ':'
}

func isLabelNameStart(b byte) bool { return isNameStart(b) && b != ':' }

// scanLabels checks the label block that opens s, calling fn (when not
// nil) with each label unescaped, and returns the index of its closing
// brace and the metric name it holds, if any: an element with no '='
// (quoted or bare) names the metric, at most once.
func scanLabels(s string, fn func(name, value string)) (end int, name string, ok bool) {
	i := 1
	for {
		i = skipBlanks(s, i)
		if i >= len(s) {
			return 0, "", false
		}
		if s[i] == '}' {
			return i, name, true
		}
		// A label name (or the metric's), bare or quoted.
		var elem string
		var n int
		if s[i] == '"' {
			elem, n, ok = quoted(s[i:])
			if !ok {
				return 0, "", false
			}
		} else {
			n = labelNameLen(s[i:])
			if n == 0 {
				// A bare metric name inside braces may hold ':'.
				n = metricNameLen(s[i:])
				if n == 0 {
					return 0, "", false
				}
			}
			elem = s[i : i+n]
		}
		i = skipBlanks(s, i+n)
		if i >= len(s) {
			return 0, "", false
		}
		if s[i] != '=' {
			if name != "" || elem == "" || (s[i] != ',' && s[i] != '}') {
				return 0, "", false
			}
			name = elem
			if s[i] == ',' {
				i++
			}
			continue
		}
		if elem == "" || elem == "__name__" {
			return 0, "", false
		}
		i = skipBlanks(s, i+1)
		if i >= len(s) || s[i] != '"' {
			return 0, "", false
		}
		var value string
		value, n, ok = quoted(s[i:])
		if !ok {
			return 0, "", false
		}
		if fn != nil {
			fn(elem, value)
		}
		i = skipBlanks(s, i+n)
		if i >= len(s) {
			return 0, "", false
		}
		switch s[i] {
		case ',':
			i++
		case '}':
		default:
			return 0, "", false
		}
	}
}

// labelNameLen is the length of the bare label name that starts s.
func labelNameLen(s string) int {
	i := 0
	for i < len(s) && (isLabelNameStart(s[i]) || (i > 0 && s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	return i
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// quoted reads the quoted string that opens s, with \\, \" and \n escaped,
// and returns it unescaped and the bytes it took.
func quoted(s string) (string, int, bool) {
	var b strings.Builder
	plain := true
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			if plain {
				return s[1:i], i + 1, true
			}
			return b.String(), i + 1, true
		case '\\':
			if i+1 >= len(s) {
				return "", 0, false
			}
			if plain {
				b.WriteString(s[1:i])
				plain = false
			}
			i++
			switch s[i] {
			case '\\', '"':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			default:
				return "", 0, false
			}
		default:
			if !plain {
				b.WriteByte(s[i])
			}
		}
	}
	return "", 0, false
}
