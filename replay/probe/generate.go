package probe

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// The fixed openings of the generated prompts, which Solve recognises. Each
// prompt is plain English a chat model answers, and carries all it takes to
// answer it.
const (
	copyPrefix       = "Repeat the following words exactly, separated by single spaces, and write nothing else: "
	arithmeticPrefix = "Compute "
	arithmeticSuffix = ". Reply with the number only."
	sortPrefix       = "Sort these integers in ascending order. Reply with them separated by a comma and a space, and nothing else: "
	jsonPrefix       = "Here is a JSON object: "
	jsonFieldPrefix  = ". Reply with the value of the field \""
	jsonFieldSuffix  = "\" only."
	listSep          = ", "
)

// pcgStream is the PCG stream of probe generation: a constant, so a seed
// alone decides its probe, and one no other part of servetrace uses with
// the same seeds.
const pcgStream = 0x70726f6265730001 // "probes" and a version

// generatedKinds are the kinds Generate draws from, equally often.
var generatedKinds = [...]string{KindCopy, KindArithmetic, KindSort, KindJSONField}

// Generate builds the probe of a seed: its kind is drawn from the seed,
// each of the four generated kinds equally often, and then its content.
// The same seed gives the same probe on every run and platform (math/rand/v2
// PCG, no global state), so a run's probes can be rebuilt from its seeds.
func Generate(seed uint64) Probe {
	r := rand.New(rand.NewPCG(seed, pcgStream))
	var p Probe
	switch kind := generatedKinds[r.IntN(len(generatedKinds))]; kind {
	case KindCopy:
		p = genCopy(r)
	case KindArithmetic:
		p = genArithmetic(r)
	case KindSort:
		p = genSort(r)
	default:
		p = genJSONField(r)
	}
	p.Grader = GraderExact
	p.MaxTokens = maxTokensFor(p.Expect)
	return p
}

// maxTokensFor is the max_tokens of a generated probe whose answer is
// expect. A byte-level tokenizer spends at most one token a byte; one more
// a word allows for tokenizers that give a leading space its own token, and
// 16 for an end-of-turn token and stray framing such as quotes or a fence.
// That is never less than twice the words plus 16.
func maxTokensFor(expect string) int {
	return len(expect) + len(strings.Fields(expect)) + 16
}

// genCopy: 5 to 20 words to repeat.
func genCopy(r *rand.Rand) Probe {
	w := make([]string, 5+r.IntN(16))
	for i := range w {
		w[i] = words[r.IntN(len(words))]
	}
	list := strings.Join(w, " ")
	return Probe{Kind: KindCopy, Prompt: copyPrefix + list, Expect: list}
}

// arithmeticOps are the operators of arithmetic probes.
var arithmeticOps = [...]string{"+", "-", "*"}

// genArithmetic: a sum, difference or product of two numbers 1..9999.
func genArithmetic(r *rand.Rand) Probe {
	a, b := int64(1+r.IntN(9999)), int64(1+r.IntN(9999))
	op := arithmeticOps[r.IntN(len(arithmeticOps))]
	prompt := arithmeticPrefix + strconv.FormatInt(a, 10) + " " + op + " " + strconv.FormatInt(b, 10) + arithmeticSuffix
	return Probe{Kind: KindArithmetic, Prompt: prompt, Expect: strconv.FormatInt(apply(a, op, b), 10)}
}

// apply computes a op b.
func apply(a int64, op string, b int64) int64 {
	switch op {
	case "+":
		return a + b
	case "-":
		return a - b
	}
	return a * b
}

// genSort: 4 to 12 integers 0..999 to sort.
func genSort(r *rand.Rand) Probe {
	n := make([]int, 4+r.IntN(9))
	for i := range n {
		n[i] = r.IntN(1000)
	}
	prompt := sortPrefix + joinInts(n)
	slices.Sort(n)
	return Probe{Kind: KindSort, Prompt: prompt, Expect: joinInts(n)}
}

// joinInts writes n in decimal, joined by listSep.
func joinInts(n []int) string {
	s := make([]string, len(n))
	for i, v := range n {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, listSep)
}

// genJSONField: an object of 3 to 6 fields with distinct names, each an
// integer 0..99999 or a string of one or two words, and one field to read.
// The answer is the value's text (a string without its quotes), graded
// exactly.
func genJSONField(r *rand.Rand) Probe {
	names := fieldNames
	n := 3 + r.IntN(4)
	for i := range n { // the first n of a partial Fisher–Yates shuffle
		j := i + r.IntN(len(names)-i)
		names[i], names[j] = names[j], names[i]
	}
	values := make([]string, n)
	var obj strings.Builder
	obj.WriteByte('{')
	for i, name := range names[:n] {
		if i > 0 {
			obj.WriteString(listSep)
		}
		obj.WriteString(jsonString(name))
		obj.WriteString(": ")
		if r.IntN(2) == 0 {
			values[i] = strconv.Itoa(r.IntN(100000))
			obj.WriteString(values[i])
		} else {
			values[i] = words[r.IntN(len(words))]
			if r.IntN(2) == 0 {
				values[i] += " " + words[r.IntN(len(words))]
			}
			obj.WriteString(jsonString(values[i]))
		}
	}
	obj.WriteByte('}')
	k := r.IntN(n)
	prompt := jsonPrefix + obj.String() + jsonFieldPrefix + names[k] + jsonFieldSuffix
	return Probe{Kind: KindJSONField, Prompt: prompt, Expect: values[k]}
}

// jsonString is s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
