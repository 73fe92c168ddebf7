package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

const (
	// jsonSearchWindow is how much of an answer is searched for a JSON
	// object: far more than any probe's answer, so a long answer costs a
	// bounded search.
	jsonSearchWindow = 1 << 20
	// jsonReadBudget bounds the bytes all the decode attempts on one
	// answer may read together. Each '{' that starts no object is a new
	// attempt from there, and nested, unterminated objects would make
	// the attempts quadratic in the window.
	jsonReadBudget = 4 * jsonSearchWindow
)

// gradeJSONField grades answer by GraderJSONField's rule.
func gradeJSONField(field, expect, answer string) bool {
	if field == "" {
		return false
	}
	obj, ok := firstObject(answer)
	if !ok {
		return false
	}
	v, ok := lookup(obj, field)
	if !ok {
		return false
	}
	if s, isString := v.(string); isString && s == expect {
		return true
	}
	got, ok := canonical(v)
	if !ok {
		return false
	}
	want := strings.TrimSpace(expect)
	if c, ok := parseCanonical(want); ok {
		want = c
	}
	return got == want
}

// firstObject returns the first JSON object in the first jsonSearchWindow
// bytes of s: the first '{' from which a whole object decodes (text after
// it is ignored). Numbers are kept as written (json.Number).
func firstObject(s string) (map[string]any, bool) {
	window := s[:min(len(s), jsonSearchWindow)]
	budget := jsonReadBudget
	for i := 0; i < len(window); i++ {
		j := strings.IndexByte(window[i:], '{')
		if j < 0 {
			return nil, false
		}
		i += j
		if !mayStartObject(window[i+1:]) {
			continue
		}
		dec := json.NewDecoder(&budgetReader{s: window[i:], left: &budget})
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			if obj, ok := v.(map[string]any); ok {
				return obj, true
			}
		}
		if budget <= 0 {
			return nil, false
		}
	}
	return nil, false
}

// mayStartObject says whether rest, what follows a '{', can continue a JSON
// object: after white space, a key's quote or the closing brace. It skips
// most braces of prose and code without a decode.
func mayStartObject(rest string) bool {
	rest = strings.TrimLeft(rest, " \t\r\n")
	return rest == "" || rest[0] == '"' || rest[0] == '}'
}

// errBudget ends a decode that would read past jsonReadBudget.
var errBudget = errors.New("probe: JSON search budget spent")

// budgetReader reads s, counting what it reads against a budget shared by
// the decode attempts on one answer.
type budgetReader struct {
	s    string
	left *int
}

func (r *budgetReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	if *r.left <= 0 {
		return 0, errBudget
	}
	n := copy(p[:min(len(p), *r.left)], r.s)
	r.s = r.s[n:]
	*r.left -= n
	return n, nil
}

// lookup follows the dotted path through objects and, where a part is a
// decimal number, arrays.
func lookup(v any, path string) (any, bool) {
	for part := range strings.SplitSeq(path, ".") {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[part]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, ok := arrayIndex(part)
			if !ok || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// arrayIndex parses a path part as an array index: decimal digits only.
func arrayIndex(part string) (int, bool) {
	if part == "" || len(part) > 9 || strings.TrimLeft(part, "0123456789") != "" {
		return 0, false
	}
	i, err := strconv.Atoi(part)
	return i, err == nil
}

// canonical is v's canonical JSON text: compact, object keys sorted, numbers
// as written, <, > and & not escaped.
func canonical(v any) (string, bool) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", false
	}
	return strings.TrimSuffix(b.String(), "\n"), true
}

// parseCanonical is the canonical text of s when s is one JSON value.
func parseCanonical(s string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false
	}
	return canonical(v)
}
