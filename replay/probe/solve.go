package probe

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// maxOperandDigits bounds an arithmetic operand Solve accepts, so that a
// product fits in an int64 (Generate's are at most 4 digits).
const maxOperandDigits = 9

// Solve answers a prompt Generate made, as a correct model would: the
// simulator answers probes with it, so a run against the simulator grades
// every probe right and a wrong grade means a bug, not the model. ok is
// false for a prompt in none of Generate's formats.
// Solve(Generate(s).Prompt), graded by Generate(s).Grade, is right for
// every seed.
func Solve(prompt string) (answer string, ok bool) {
	if rest, found := strings.CutPrefix(prompt, copyPrefix); found {
		return solveCopy(rest)
	}
	if rest, found := strings.CutPrefix(prompt, sortPrefix); found {
		return solveSort(rest)
	}
	if rest, found := strings.CutPrefix(prompt, jsonPrefix); found {
		return solveJSONField(rest)
	}
	if rest, found := strings.CutPrefix(prompt, arithmeticPrefix); found {
		return solveArithmetic(rest)
	}
	return "", false
}

// solveCopy repeats the words, joined by single spaces.
func solveCopy(list string) (string, bool) {
	w := strings.Fields(list)
	if len(w) == 0 {
		return "", false
	}
	return strings.Join(w, " "), true
}

// solveArithmetic computes "<a> <op> <b>" followed by arithmeticSuffix.
func solveArithmetic(rest string) (string, bool) {
	expr, found := strings.CutSuffix(rest, arithmeticSuffix)
	if !found {
		return "", false
	}
	parts := strings.Split(expr, " ")
	if len(parts) != 3 || !slices.Contains(arithmeticOps[:], parts[1]) {
		return "", false
	}
	a, okA := operand(parts[0])
	b, okB := operand(parts[2])
	if !okA || !okB {
		return "", false
	}
	return strconv.FormatInt(apply(a, parts[1], b), 10), true
}

// operand parses a non-negative decimal of at most maxOperandDigits digits.
func operand(s string) (int64, bool) {
	if s == "" || len(s) > maxOperandDigits || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// solveSort sorts a list of integers joined by listSep.
func solveSort(list string) (string, bool) {
	parts := strings.Split(list, listSep)
	n := make([]int, len(parts))
	for i, s := range parts {
		v, err := strconv.Atoi(s)
		if err != nil {
			return "", false
		}
		n[i] = v
	}
	slices.Sort(n)
	return joinInts(n), true
}

// solveJSONField reads the named field of the object that rest starts
// with; the field must hold a string or a number.
func solveJSONField(rest string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(rest))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return "", false
	}
	tail := rest[dec.InputOffset():] // the decoder read rest; what follows the object
	name, found := strings.CutPrefix(tail, jsonFieldPrefix)
	if !found {
		return "", false
	}
	if name, found = strings.CutSuffix(name, jsonFieldSuffix); !found || strings.Contains(name, `"`) {
		return "", false
	}
	switch v := obj[name].(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}
