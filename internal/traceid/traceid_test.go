package traceid

import (
	"regexp"
	"strings"
	"testing"
)

// TestTraceparentAgainstSha256sum: the ids are the halves of SHA-256 as
// sha256sum computes them (printf 'servetrace run\x00run-1' | sha256sum,
// and the same for 'servetrace request\x00req-7'), in the W3C shape.
func TestTraceparentAgainstSha256sum(t *testing.T) {
	const run, req = "61f360d0594c7f7c", "6bcb9168c534c5cc337f9751aebb7f7c"
	if got := For("run-1", "req-7").String(); got != run+req[:16] {
		t.Errorf("For = %s, want %s", got, run+req[:16])
	}
	want := "00-" + run + req[:16] + "-" + req[16:] + "-01"
	if got := Traceparent("run-1", "req-7"); got != want {
		t.Errorf("Traceparent = %s, want %s", got, want)
	}
	if !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`).MatchString(want) {
		t.Errorf("%s is not a W3C traceparent", want)
	}
}

// TestRunPrefixTellsRunsApart: every request of a run shares the run's
// first half, another run's does not, and Parse reads back what String
// writes while refusing malformed and all-zero ids.
func TestRunPrefixTellsRunsApart(t *testing.T) {
	a, b := For("run-a", "1"), For("run-a", "2")
	if [8]byte(a[:8]) != Run("run-a") || [8]byte(b[:8]) != Run("run-a") || a == b {
		t.Errorf("ids %s and %s of one run: want its prefix and different halves", a, b)
	}
	if c := For("run-b", "1"); [8]byte(c[:8]) == Run("run-a") {
		t.Errorf("run-b's id %s carries run-a's prefix", c)
	}
	for _, c := range []struct {
		in string
		ok bool
	}{
		{a.String(), true},
		{"6BCB9168C534C5CC337F9751AEBB7F7C", true},
		{"00000000000000000000000000000000", false},
		{"6bcb9168c534c5cc337f9751aebb7f7", false},
		{"6bcb9168c534c5cc337f9751aebb7f7g", false},
		{"", false},
	} {
		id, ok := Parse(c.in)
		if ok != c.ok || ok && len(c.in) == 32 && id.String() != strings.ToLower(c.in) {
			t.Errorf("Parse(%q) = %s, %v; want ok %v", c.in, id, ok, c.ok)
		}
	}
}
