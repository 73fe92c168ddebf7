package probe

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// seeds is how many seeds the generated-probe tests cover.
const seeds = 10000

// TestGenerateGolden pins the probes of the first seeds, so a change to
// generation, which would give past runs' seeds other probes, is seen.
func TestGenerateGolden(t *testing.T) {
	tests := []Probe{
		{Kind: KindCopy, Grader: GraderExact, MaxTokens: 104,
			Prompt: "Repeat the following words exactly, separated by single spaces, and write nothing else: goat coal area gold path back open card form head frog away gate acid map",
			Expect: "goat coal area gold path back open card form head frog away gate acid map"},
		{Kind: KindJSONField, Grader: GraderExact, MaxTokens: 22,
			Prompt: `Here is a JSON object: {"name": "frog", "color": 73516, "level": 55666}. Reply with the value of the field "color" only.`,
			Expect: "73516"},
		{Kind: KindArithmetic, Grader: GraderExact, MaxTokens: 24,
			Prompt: "Compute 2973 * 1164. Reply with the number only.", Expect: "3460572"},
		{Kind: KindSort, Grader: GraderExact, MaxTokens: 56,
			Prompt: "Sort these integers in ascending order. Reply with them separated by a comma and a space, and nothing else: 174, 641, 992, 597, 640, 932, 714",
			Expect: "174, 597, 640, 641, 714, 932, 992"},
	}
	for seed, want := range tests {
		if got := Generate(uint64(seed)); got != want {
			t.Errorf("Generate(%d)\n got %+v\nwant %+v", seed, got, want)
		}
	}
}

// Independent readings of the generated formats, to check each probe's
// content is in the ranges the formats promise.
var (
	copyRE       = regexp.MustCompile(`^Repeat the following words exactly, separated by single spaces, and write nothing else: ([a-z]+(?: [a-z]+)*)$`)
	arithmeticRE = regexp.MustCompile(`^Compute ([1-9][0-9]{0,3}) ([-+*]) ([1-9][0-9]{0,3})\. Reply with the number only\.$`)
	sortRE       = regexp.MustCompile(`^Sort these integers in ascending order\. Reply with them separated by a comma and a space, and nothing else: ([0-9]{1,3}(?:, [0-9]{1,3})*)$`)
	jsonFieldRE  = regexp.MustCompile(`^Here is a JSON object: (\{.*\})\. Reply with the value of the field "([a-z]+)" only\.$`)
)

// TestGenerated: for every seed, the probe is the same each time, in its
// kind's format and ranges, solved and graded right, and a changed answer
// is graded wrong; the four kinds come about equally often.
func TestGenerated(t *testing.T) {
	count := map[string]int{}
	for seed := range uint64(seeds) {
		p := Generate(seed)
		if again := Generate(seed); again != p {
			t.Fatalf("seed %d: Generate gave %+v, then %+v", seed, p, again)
		}
		count[p.Kind]++
		checkFormat(t, seed, p)
		if p.Grader != GraderExact || p.Field != "" || p.MaxTokens < 2*len(strings.Fields(p.Expect))+16 {
			t.Fatalf("seed %d: grader %q, field %q, max_tokens %d for %+v", seed, p.Grader, p.Field, p.MaxTokens, p)
		}
		answer, ok := Solve(p.Prompt)
		if !ok || answer != p.Expect || !p.Grade(answer) {
			t.Fatalf("seed %d: Solve gave %q, %v; want %q graded right", seed, answer, ok, p.Expect)
		}
		for _, right := range []string{" " + answer + "\n", "`" + answer + "`", `"` + answer + `"`, "```\n" + answer + "\n```"} {
			if !p.Grade(right) {
				t.Fatalf("seed %d: %q graded wrong", seed, right)
			}
		}
		wrong := []string{"", answer + ".", answer + " " + answer, "0" + answer, strings.ToUpper(answer[:1]) + answer[1:]}
		for _, i := range []int{0, len(answer) / 2, len(answer) - 1} {
			wrong = append(wrong, alter(answer, i))
		}
		for _, w := range wrong {
			if w != answer && p.Grade(w) { // upper case leaves a number as it is
				t.Fatalf("seed %d: %q graded right for %q", seed, w, answer)
			}
		}
	}
	for _, kind := range generatedKinds {
		if n := count[kind]; n < seeds/4-250 || n > seeds/4+250 {
			t.Errorf("%s: %d of %d seeds, want about a quarter", kind, n, seeds)
		}
	}
	if len(count) != len(generatedKinds) {
		t.Errorf("kinds %v", count)
	}
}

// checkFormat checks p's prompt against its kind's format and ranges,
// without Solve.
func checkFormat(t *testing.T, seed uint64, p Probe) {
	t.Helper()
	fail := func(what string) { t.Fatalf("seed %d: %s: %+v", seed, what, p) }
	switch p.Kind {
	case KindCopy:
		m := copyRE.FindStringSubmatch(p.Prompt)
		if m == nil {
			fail("not the copy format")
		}
		w := strings.Split(m[1], " ")
		if len(w) < 5 || len(w) > 20 {
			fail("word count")
		}
		for _, word := range w {
			if !slices.Contains(words[:], word) {
				fail("a word not in the list")
			}
		}
	case KindArithmetic:
		if arithmeticRE.FindStringSubmatch(p.Prompt) == nil {
			fail("not the arithmetic format, or operands outside 1..9999")
		}
	case KindSort:
		m := sortRE.FindStringSubmatch(p.Prompt)
		if m == nil {
			fail("not the sort format")
		}
		if n := len(strings.Split(m[1], ", ")); n < 4 || n > 12 {
			fail("list length")
		}
	case KindJSONField:
		m := jsonFieldRE.FindStringSubmatch(p.Prompt)
		if m == nil {
			fail("not the json-field format")
		}
		if n := strings.Count(m[1], `": `); n < 3 || n > 6 {
			fail("field count")
		}
		if !strings.Contains(m[1], `"`+m[2]+`": `) {
			fail("the field asked for is not in the object")
		}
	default:
		fail("unknown kind")
	}
}

// alter changes the byte at i to another letter, digit or 'x'.
func alter(s string, i int) string {
	c := s[i]
	switch {
	case c >= '0' && c <= '9':
		c = '0' + (c-'0'+1)%10
	case c >= 'a' && c <= 'z':
		c = 'a' + (c-'a'+1)%26
	default:
		c = 'x'
	}
	return s[:i] + string(c) + s[i+1:]
}

// TestWordLists: the lists are long enough, distinct and plain.
func TestWordLists(t *testing.T) {
	for name, list := range map[string][]string{"words": words[:], "fieldNames": fieldNames[:]} {
		seen := map[string]bool{}
		for _, w := range list {
			if seen[w] || strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") != "" || w == "" {
				t.Errorf("%s: %q repeated or not lowercase letters", name, w)
			}
			seen[w] = true
		}
	}
	if len(words) < 150 || len(fieldNames) < 6 {
		t.Errorf("%d words, %d field names", len(words), len(fieldNames))
	}
}

// TestSolve: hand-written prompts with answers worked out by hand.
func TestSolve(t *testing.T) {
	const sortP = "Sort these integers in ascending order. Reply with them separated by a comma and a space, and nothing else: "
	const copyP = "Repeat the following words exactly, separated by single spaces, and write nothing else: "
	tests := []struct {
		prompt, want string
		ok           bool
	}{
		{"Compute 12 * 34. Reply with the number only.", "408", true},
		{"Compute 5 - 9. Reply with the number only.", "-4", true},
		{"Compute 9999 + 1. Reply with the number only.", "10000", true},
		{"Compute 9999 * 9999. Reply with the number only.", "99980001", true},
		{sortP + "5, 3, 9", "3, 5, 9", true},
		{sortP + "7, 0, 7, 3", "0, 3, 7, 7", true},
		{sortP + "42", "42", true},
		{copyP + "red blue red", "red blue red", true},
		{`Here is a JSON object: {"city": "oslo", "id": 7}. Reply with the value of the field "city" only.`, "oslo", true},
		{`Here is a JSON object: {"city": "new york", "id": 7}. Reply with the value of the field "id" only.`, "7", true},
		{`Here is a JSON object: {"city": "oslo"}. Reply with the value of the field "id" only.`, "", false},
		{`Here is a JSON object: {"ok": true}. Reply with the value of the field "ok" only.`, "", false},
		{`Here is a JSON object: [1]. Reply with the value of the field "ok" only.`, "", false},
		{`Here is a JSON object: {"id": 7}. Reply with the value of the field "id".`, "", false},
		{"Compute 1 / 2. Reply with the number only.", "", false},
		{"Compute 1 + 2.", "", false},
		{"Compute -1 + 2. Reply with the number only.", "", false},
		{"Compute 1234567890 * 2. Reply with the number only.", "", false},
		{"Compute 1  + 2. Reply with the number only.", "", false},
		{sortP + "5, three, 9", "", false},
		{sortP, "", false},
		{copyP, "", false},
		{"What is 2 + 2?", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, ok := Solve(tc.prompt)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Solve(%q) = %q, %v; want %q, %v", tc.prompt, got, ok, tc.want, tc.ok)
		}
	}
}

// gradeCase is one answer and the grade it should get.
type gradeCase struct {
	answer string
	want   bool
}

func runGradeCases(t *testing.T, p Probe, cases []gradeCase) {
	t.Helper()
	for _, c := range cases {
		if got := p.Grade(c.answer); got != c.want {
			t.Errorf("%s %q (field %q): Grade(%q) = %v, want %v", p.Grader, p.Expect, p.Field, c.answer, got, c.want)
		}
	}
}

// TestGradeExact: surrounding white space, one pair of quotes or backticks
// and a fence are forgiven; any change inside is not.
func TestGradeExact(t *testing.T) {
	runGradeCases(t, Probe{Grader: GraderExact, Expect: "408"}, []gradeCase{
		{"408", true}, {" 408\n", true}, {`"408"`, true}, {"'408'", true}, {"`408`", true},
		{"\u201c408\u201d", true}, {"```\n408\n```", true}, {"```text\n408\n```", true}, {"```408```", true},
		{"  ```\n  \"408\"  \n```  ", true},
		{"", false}, {"4 08", false}, {"408.", false}, {"0408", false}, {"The answer is 408", false},
		{`""408""`, false}, {`"408'`, false}, {"```408", false}, {`"`, false}, {"```\n408\n```\n```\n408\n```", false},
		{"409", false}, {"4080", false},
	})
	// Expect is trimmed; an Expect in quotes matches itself.
	runGradeCases(t, Probe{Expect: " 408\n"}, []gradeCase{{"408", true}, {"409", false}})
	runGradeCases(t, Probe{Grader: GraderExact, Expect: `"quoted"`}, []gradeCase{{`"quoted"`, true}, {"quoted", false}})
	runGradeCases(t, Probe{Grader: GraderExact, Expect: "new york"}, []gradeCase{{"new york", true}, {"New York", false}, {"new  york", false}})
	runGradeCases(t, Probe{Grader: "fuzzy", Expect: "408"}, []gradeCase{{"408", false}})
}

// TestGradeRegex: the pattern must match the whole trimmed answer.
func TestGradeRegex(t *testing.T) {
	re := func(pattern string) Probe { return Probe{Grader: GraderRegex, Expect: pattern} }
	runGradeCases(t, re(`\d+`), []gradeCase{{"408", true}, {" 408\n", true}, {"408 apples", false}, {"", false}})
	runGradeCases(t, re(`42`), []gradeCase{{"42", true}, {"142", false}, {"420", false}})
	runGradeCases(t, re(`(?i)paris\.?`), []gradeCase{{"PARIS", true}, {"Paris.", true}, {"Paris, France", false}})
	runGradeCases(t, re(`a|ab`), []gradeCase{{"ab", true}, {"a", true}, {"abc", false}})
	runGradeCases(t, re(`^408$`), []gradeCase{{"408", true}, {"x408", false}})
	runGradeCases(t, re(`(?m)^408$`), []gradeCase{{"408\nmore", false}})
	runGradeCases(t, re(`\Qa.b`), []gradeCase{{"a.b", true}, {"axb", false}})
	runGradeCases(t, re(``), []gradeCase{{"", true}, {"  ", true}, {"x", false}})
	// A pattern that does not compile, or escapes its group if wrapped,
	// grades every answer wrong or matches only as written.
	runGradeCases(t, re(`a)|(b`), []gradeCase{{"a", false}, {"b", false}, {"axyz", false}})
	runGradeCases(t, re(`(`), []gradeCase{{"(", false}, {"", false}})
}

// TestGradeJSONField: the first JSON object in the answer is found in
// prose or a fence, and its field compared as a JSON value.
func TestGradeJSONField(t *testing.T) {
	jf := func(field, expect string) Probe { return Probe{Grader: GraderJSONField, Field: field, Expect: expect} }
	runGradeCases(t, jf("answer", "4"), []gradeCase{
		{`{"answer": 4}`, true},
		{"Sure! Here it is:\n```json\n{\n  \"answer\": 4\n}\n```\nHope that helps.", true},
		{`{"answer": "4"}`, true},
		{`{"reasoning": "2+2 {is} 4", "answer": 4}`, true},
		{`{answer: 4} is not JSON, but {"answer": 4} is`, true},
		{`{"answer": 4.0}`, false},
		{`{"answer": 5}`, false},
		{`{"answer": 5} {"answer": 4}`, false},
		{`{"other": 4}`, false},
		{`{"x": {"answer": 4}}`, false},
		{`{"answer": [4]}`, false},
		{`{"answer": 4`, false},
		{"4", false},
		{"", false},
	})
	runGradeCases(t, jf("result.value", "Paris"), []gradeCase{
		{`{"result": {"value": "Paris"}}`, true}, {`{"result": {"value": "paris"}}`, false},
		{`{"result": "Paris"}`, false}, {`{"result": {"value": " Paris"}}`, false},
	})
	runGradeCases(t, jf("items.1", "2"), []gradeCase{{`{"items": [1, 2]}`, true}, {`{"items": [2]}`, false}, {`{"items": {"1": 2}}`, true}})
	runGradeCases(t, jf("items.-1", "2"), []gradeCase{{`{"items": [1, 2]}`, false}})
	runGradeCases(t, jf("obj", `{"a": 2, "b": [1, "<x>"]}`), []gradeCase{{`{"obj": {"b":[1,"<x>"],"a":2}}`, true}, {`{"obj": {"a": 2}}`, false}})
	runGradeCases(t, jf("s", `"4"`), []gradeCase{{`{"s": "4"}`, true}, {`{"s": 4}`, false}})
	runGradeCases(t, jf("s", " x "), []gradeCase{{`{"s": " x "}`, true}, {`{"s": "x"}`, false}})
	runGradeCases(t, jf("s", "café"), []gradeCase{{`{"s": "caf\u00e9"}`, true}})
	runGradeCases(t, jf("n", "null"), []gradeCase{{`{"n": null}`, true}, {`{}`, false}})
	runGradeCases(t, jf("", "4"), []gradeCase{{`{"": 4}`, false}})
}

// TestGradeJSONFieldBounds: only the first 1 MiB is searched, and answers
// built to make the search slow end, wrong.
func TestGradeJSONFieldBounds(t *testing.T) {
	p := Probe{Grader: GraderJSONField, Field: "answer", Expect: "4"}
	obj := `{"answer": 4}`
	runGradeCases(t, p, []gradeCase{
		{strings.Repeat("x", jsonSearchWindow-len(obj)) + obj, true},
		{strings.Repeat("x", jsonSearchWindow) + obj, false},
		{strings.Repeat(`{"a":`, jsonSearchWindow/5) + obj, false},
		{strings.Repeat(`{"a":1,"b":[`, jsonSearchWindow/12), false},
		{strings.Repeat(`{"`, jsonSearchWindow), false},
		{strings.Repeat(`{`, 3*jsonSearchWindow), false},
	})
}

// FuzzGrade: Grade never panics, and gives the same grade twice; under the
// exact grader, Expect itself is always right.
func FuzzGrade(f *testing.F) {
	for seed := range uint64(8) {
		p := Generate(seed)
		f.Add(p.Grader, p.Field, p.Expect, p.Expect)
	}
	f.Add(GraderExact, "", "408", "```json\n\"408\"\n```")
	f.Add(GraderRegex, "", `a)|(b`, "a")
	f.Add(GraderRegex, "", `(?i)x{2,5}\d*`, "XXX123")
	f.Add(GraderRegex, "", `\Q`, "")
	f.Add(GraderJSONField, "a.b.0", "1", "text ```json\n{\"a\": {\"b\": [1]}}\n``` text")
	f.Add(GraderJSONField, "a", `{"x":1}`, `{"a":{"x":1}}`)
	f.Add(GraderJSONField, "..", "", `{"":{"":{"":1}}}`)
	f.Add(GraderJSONField, "a", "1", strings.Repeat(`{"a":`, 3000))
	f.Add("", "", "\xff\xfe", "\x00\"\xff\"")
	f.Fuzz(func(t *testing.T, grader, field, expect, answer string) {
		p := Probe{Grader: grader, Field: field, Expect: expect}
		got := p.Grade(answer)
		if again := p.Grade(answer); again != got {
			t.Fatalf("graded %v, then %v", got, again)
		}
		if (grader == GraderExact || grader == "") && !p.Grade(expect) {
			t.Fatalf("exact: Expect %q graded wrong against itself", expect)
		}
	})
}

// FuzzSolve: Solve never panics on a prompt, whatever it holds (the
// simulator calls it on every prompt it is sent), and its arithmetic
// answers are numbers.
func FuzzSolve(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(Generate(seed).Prompt)
	}
	f.Add("Compute 999999999 * 999999999. Reply with the number only.")
	f.Add(`Here is a JSON object: {"a": {"b": 1}}. Reply with the value of the field "a" only.`)
	f.Add("Sort these integers in ascending order. Reply with them separated by a comma and a space, and nothing else: -1, 99999999999999999999")
	f.Fuzz(func(t *testing.T, prompt string) {
		answer, ok := Solve(prompt)
		if !ok && answer != "" {
			t.Fatalf("not ok, yet answered %q", answer)
		}
		if ok && strings.HasPrefix(prompt, arithmeticPrefix) {
			if _, err := strconv.ParseInt(answer, 10, 64); err != nil {
				t.Fatalf("arithmetic answer %q: %v", answer, err)
			}
		}
	})
}

// TestGradeBoundsTheAnswer (issue 46 item 9): an answer longer than
// MaxGradedAnswer is graded wrong by every grader, unread, and one longer
// than maxRegexAnswer by a pattern, even one that matches anything; one
// of exactly the bound is read.
func TestGradeBoundsTheAnswer(t *testing.T) {
	obj := `{"a": 1}`
	for _, c := range []struct {
		p      Probe
		answer string
		right  bool
	}{
		{Probe{Grader: GraderRegex, Expect: `(?s).*`}, strings.Repeat("a", maxRegexAnswer), true},
		{Probe{Grader: GraderRegex, Expect: `(?s).*`}, strings.Repeat("a", maxRegexAnswer+1), false},
		{Probe{Grader: GraderExact, Expect: strings.Repeat("a", MaxGradedAnswer)}, strings.Repeat("a", MaxGradedAnswer), true},
		{Probe{Grader: GraderExact, Expect: strings.Repeat("a", MaxGradedAnswer+1)}, strings.Repeat("a", MaxGradedAnswer+1), false},
		{Probe{Grader: GraderJSONField, Field: "a", Expect: "1"}, obj + strings.Repeat(" ", MaxGradedAnswer-len(obj)), true},
		{Probe{Grader: GraderJSONField, Field: "a", Expect: "1"}, obj + strings.Repeat(" ", MaxGradedAnswer), false},
	} {
		if got := c.p.Grade(c.answer); got != c.right {
			t.Errorf("%s: an answer of %d bytes graded %v; want %v", c.p.Grader, len(c.answer), got, c.right)
		}
	}
}
