package datasets

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArrayElements splits arrays at top-level commas only: brackets and
// commas inside strings, escaped quotes and nesting stay in their element.
func TestArrayElements(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  bool
	}{
		{`[]`, nil, false},
		{` [ {"a":1} , {"b":[1,2]} ]`, []string{`{"a":1}`, `{"b":[1,2]}`}, false},
		{`[{"s":"x],[{\"y"},3,"t,]"]`, []string{`{"s":"x],[{\"y"}`, `3`, `"t,]"`}, false},
		{`[{"a":1},`, []string{`{"a":1}`}, true}, // cut short
		{`{"a":1}`, nil, true},                   // not an array
	} {
		var got []string
		err := arrayElements(bufio.NewReader(strings.NewReader(c.in)), func(elem []byte, n int64, err error) error {
			got = append(got, strings.TrimSpace(string(elem)))
			return err
		})
		if (err != nil) != c.err || strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: elements %q, err %v; want %q, err %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestShareGPTHugeConversationRejected: one conversation over MaxLineBytes
// is rejected as it streams, and those after it still convert.
func TestShareGPTHugeConversationRejected(t *testing.T) {
	conv := func(id, text string) string {
		return `{"id":"` + id + `","conversations":[{"from":"human","value":"` + text + `"},{"from":"gpt","value":"ok"}]}`
	}
	in := filepath.Join(t.TempDir(), "big.json")
	body := "[" + conv("a", "hello there") + "," + conv("huge", strings.Repeat("word ", MaxLineBytes/5+10)) + "," + conv("b", "after the huge one") + "]"
	if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sink memSink
	if _, err := Read(context.Background(), f, Options{Name: "big.json", Log: LogOptions{Salt: testSalt(t), BlockSize: 8}}, &sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 2 || len(sink.rejects) != 1 || sink.rejects[0].Line != 2 || !strings.Contains(sink.rejects[0].Reason, "longer than") {
		t.Fatalf("%d rows, rejects %+v; want the two small conversations and one reject, element 2, for the huge one", len(sink.rows), sink.rejects)
	}
}
