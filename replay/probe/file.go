package probe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/servetrace/servetrace/internal/regfile"
)

// Bounds on a user's probe file, so that a wrong or hostile file costs a
// bounded read: probes are a sample mixed into a run, and none needs more.
const (
	maxFileProbes    = 100_000
	maxFileBytes     = 64 << 20
	maxLineBytes     = 1 << 20
	maxProbeTokens   = 32768
	defaultMaxTokens = 256
)

// fileLine is one line of a probe file. Prompt, Expected and MaxTokens are
// pointers to tell a missing field from an empty or zero one.
type fileLine struct {
	Prompt    *string `json:"prompt"`
	Expected  *string `json:"expected"`
	Grader    string  `json:"grader"`
	Field     string  `json:"field"`
	MaxTokens *int    `json:"max_tokens"`
}

// ReadFile reads a user's probes from JSONL: one object a line with
// "prompt" (a non-empty string, required), "expected" (a string, required:
// the answer, or for grader regex the pattern), "grader" ("exact", the
// default, "regex" or "json-field"), "field" (the dotted path, required for
// json-field and allowed only there) and "max_tokens" (1 to 32768, default
// 256); each probe's Kind is KindUser; a regex grader's pattern is at
// most 4 KiB and compiles to at most 2,048 instructions, since grading
// costs the answer's length times the program's. Empty lines are skipped. Anything
// else is an error naming the file and line and what would fix it (an
// unknown field included, so a misspelt "grader" is not silently exact),
// and never quoting the prompt or answer. It reads only a regular file, so
// a named pipe cannot hang it, and at most 100,000 probes of lines up to
// 1 MiB, 64 MiB in all.
func ReadFile(path string) ([]Probe, error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("probe file: %w", err)
	}
	defer f.Close()
	return read(f, path)
}

// read parses the probe file r, named name in errors.
func read(r io.Reader, name string) ([]Probe, error) {
	sc := bufio.NewScanner(r)
	// Room for a line of maxLineBytes, its "\r\n" and one byte more, so a
	// longer line is seen as one rather than as a scanner error.
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes+3)
	var probes []Probe
	n, size := 0, 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if size += len(line) + 1; size > maxFileBytes {
			return nil, fmt.Errorf("%s:%d: the file passes %d MiB; keep a sample of its probes", name, n, maxFileBytes>>20)
		}
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\uFEFF")) // a byte order mark
		}
		if len(line) > maxLineBytes {
			return nil, fmt.Errorf("%s:%d: line longer than 1 MiB; a probe's prompt must be shorter", name, n)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(probes) == maxFileProbes {
			return nil, fmt.Errorf("%s:%d: more than %d probes; split the file or keep a sample of it", name, n, maxFileProbes)
		}
		p, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		probes = append(probes, p)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than 1 MiB; a probe's prompt must be shorter", name, n+1)
		}
		return nil, fmt.Errorf("%s:%d: reading: %w", name, n+1, err)
	}
	if len(probes) == 0 {
		return nil, fmt.Errorf("%s: no probes; each line holds one JSON object such as {\"prompt\": \"...\", \"expected\": \"...\"}", name)
	}
	return probes, nil
}

// parseLine parses and checks one non-empty line.
func parseLine(line []byte) (Probe, error) {
	var l fileLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Probe{}, describeJSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Probe{}, errors.New(`more than one JSON value on the line; write one probe object a line`)
	}
	p := Probe{Kind: KindUser, Grader: l.Grader, Field: l.Field, MaxTokens: defaultMaxTokens}
	switch {
	case l.Prompt == nil:
		return Probe{}, errors.New(`no "prompt"; give the message to send as a string`)
	case strings.TrimSpace(*l.Prompt) == "":
		return Probe{}, errors.New(`"prompt" is empty; give the message to send`)
	case l.Expected == nil:
		return Probe{}, errors.New(`no "expected"; give the correct answer (for grader regex, a pattern that matches it)`)
	}
	p.Prompt, p.Expect = *l.Prompt, *l.Expected
	if l.MaxTokens != nil {
		if *l.MaxTokens < 1 || *l.MaxTokens > maxProbeTokens {
			return Probe{}, fmt.Errorf(`"max_tokens" is %d; use 1 to %d, or leave it out for %d`, *l.MaxTokens, maxProbeTokens, defaultMaxTokens)
		}
		p.MaxTokens = *l.MaxTokens
	}
	switch p.Grader {
	case "":
		p.Grader = GraderExact
	case GraderExact, GraderRegex, GraderJSONField:
	default:
		return Probe{}, fmt.Errorf(`"grader" is %q; use exact, regex or json-field`, clip(p.Grader))
	}
	if p.Field != "" && p.Grader != GraderJSONField {
		return Probe{}, fmt.Errorf(`"field" is set but "grader" is %s; set "grader": "json-field" to compare a field, or drop "field"`, p.Grader)
	}
	switch p.Grader {
	case GraderJSONField:
		if p.Field == "" {
			return Probe{}, errors.New(`grader json-field needs "field", the dotted path of the field to compare, such as "result.answer"`)
		}
		if slices.Contains(strings.Split(p.Field, "."), "") {
			return Probe{}, fmt.Errorf(`"field" %q has an empty part; write a dotted path such as "result.answer"`, clip(p.Field))
		}
	case GraderRegex:
		re, err := compileWhole(p.Expect)
		var big *patternTooBig
		switch {
		case errors.As(err, &big):
			return Probe{}, fmt.Errorf(`"expected" %s`, big.Error())
		case err != nil:
			return Probe{}, fmt.Errorf(`"expected" is not an RE2 pattern (%s); fix the pattern, or use "grader": "exact" for literal text`, regexpProblem(err))
		}
		p.re = re
	}
	return p, nil
}

// regexpProblem says what is wrong with a pattern without quoting it: the
// pattern is a probe's answer.
func regexpProblem(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return string(se.Code)
	}
	return "it does not compile"
}

// describeJSONError says what is wrong with a line that did not decode,
// without quoting its text.
func describeJSONError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf(`not valid JSON (at byte %d); each line holds one JSON object such as {"prompt": "...", "expected": "..."}`, se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New(`the JSON object does not end on this line; write each probe on one line`)
	case errors.As(err, &te) && te.Field == "":
		return fmt.Errorf(`a JSON %s, not an object; each line holds one object such as {"prompt": "...", "expected": "..."}`, te.Value)
	case errors.As(err, &te):
		return fmt.Errorf(`%q is a JSON %s; it must be %s`, clip(te.Field), te.Value, typeName(te.Type))
	}
	if key, found := strings.CutPrefix(err.Error(), "json: unknown field "); found {
		return fmt.Errorf(`unknown field %s; the fields are prompt, expected, grader, field and max_tokens`, clip(key))
	}
	return fmt.Errorf("not a probe object: %w", err)
}

// typeName names a fileLine field's type for a user.
func typeName(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == nil:
		return "another type"
	case t.Kind() == reflect.Int:
		return "an integer"
	}
	return "a " + t.Kind().String()
}

// clip shortens a value from the file for an error message.
func clip(s string) string {
	const most = 40
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
