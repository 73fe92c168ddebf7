package sim

import (
	"fmt"
	"strings"
	"testing"
)

// TestGreedyAnswersDependOnThePromptAlone: at temperature 0 a prompt gets
// the same answer from two servers of one seed whatever came before it,
// another answer under another seed or another prompt; sampled, the
// answer follows the request's place in the server's order; with
// CorruptShare 1 every greedy answer is another of the same length.
func TestGreedyAnswersDependOnThePromptAlone(t *testing.T) {
	body := func(prompt, temperature string) string {
		return fmt.Sprintf(`{"model":"servetrace-sim","max_tokens":12,"temperature":%s,"messages":[{"role":"user","content":%q}]}`, temperature, prompt)
	}
	answer := func(rs *Running, prompt, temperature string) string {
		t.Helper()
		code, r := call(t, rs.URL+"/v1/chat/completions", body(prompt, temperature))
		if code != 200 || len(r.Choices) != 1 {
			t.Fatalf("status %d, %d choices", code, len(r.Choices))
		}
		return r.Choices[0].Message.Content
	}
	seeded := func(seed uint64, corrupt float64) *Running {
		o := fast()
		o.Seed, o.CorruptShare = seed, corrupt
		return start(t, o)
	}
	a, b, other, bad := seeded(7, 0), seeded(7, 0), seeded(8, 0), seeded(7, 1)
	for _, p := range []string{"warm one", "warm two", "warm three"} {
		answer(b, p, "0")
	}
	greedyA, greedyB := answer(a, "the question", "0"), answer(b, "the question", "0")
	if greedyA != greedyB {
		t.Errorf("greedy answers differ with the server's history: %q vs %q", greedyA, greedyB)
	}
	if answer(a, "another question", "0") == greedyA {
		t.Error("two prompts got one greedy answer")
	}
	if answer(other, "the question", "0") == greedyA {
		t.Error("another seed gave the same greedy answer")
	}
	if s1, s2 := answer(seeded(7, 0), "the question", "1"), answer(b, "the question", "1"); s1 == s2 {
		t.Error("sampled answers at different places in the servers' order are alike")
	}
	wrong := answer(bad, "the question", "0")
	if wrong == greedyA || len(strings.Fields(wrong)) != len(strings.Fields(greedyA)) {
		t.Errorf("a corrupted answer %q; want another of as many words as %q", wrong, greedyA)
	}
}
