package tokenize

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// TestRankFileMatchesBundledEncoding writes cl100k_base's ranks to a file in
// tiktoken format and checks that the tokenizer built from it counts exactly
// as the bundled encoding does.
func TestRankFileMatchesBundledEncoding(t *testing.T) {
	raw, err := assets.Assets.ReadFile("cl100k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.model")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if !IsRankFile(path) || IsRankFile(CL100K) {
		t.Fatal("IsRankFile misclassifies")
	}
	fromFile, err := LoadRankFile(path, "")
	if err != nil {
		t.Fatal(err)
	}
	bundled, _ := Get(CL100K)
	pb, _ := NewPromptBuilder(fromFile, 64)
	texts := []string{"hello world", "Ünïcödé — 東京 🚀 tabs\tand\nnewlines", "x = f(y) + 12345678;", "<|begin_of_text|> as text", pb.Build(300, []int64{1, 2}, 3)}
	for _, s := range texts {
		if a, b := fromFile.Count(s), bundled.Count(s); a != b {
			t.Errorf("%q: rank file counts %d, cl100k_base %d", s, a, b)
		}
	}
	if got := fromFile.Count(pb.Build(300, nil, 9)); got != 300 {
		t.Errorf("prompt built on the rank-file tokenizer has %d tokens, want 300", got)
	}
}

func TestRankFileErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		content, want string
	}{
		{"IQ== 0\nnot-base64!! 1\n", "line 2"},
		{"IQ== zero\n", "line 1"},
		{"IQ== 0\n", "at least the 256 byte tokens"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, "bad.tiktoken")
		os.WriteFile(p, []byte(c.content), 0o644)
		if _, err := LoadRankFile(p, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.content, err, c.want)
		}
	}
	if _, err := LoadRankFile(filepath.Join(dir, "missing.model"), ""); err == nil {
		t.Error("missing rank file loaded")
	}
	// Every byte, then one more token on a rank already taken: refused,
	// with the default pattern and with one of the file's own.
	var sb strings.Builder
	for b := range 256 {
		fmt.Fprintf(&sb, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(b)}), b)
	}
	fmt.Fprintf(&sb, "%s 7\n", base64.StdEncoding.EncodeToString([]byte("ab")))
	p := filepath.Join(dir, "shared.tiktoken")
	os.WriteFile(p, []byte(sb.String()), 0o644)
	for _, pattern := range []string{"", `\S+|\s+`} {
		if _, err := LoadRankFile(p, pattern); err == nil {
			t.Errorf("pattern %q: a rank file with two tokens on rank 7 loaded", pattern)
		}
	}
}

// TestRankFileIsBoundedAndNeverBlocks: a named pipe given as the rank
// file is refused without waiting for a writer, a device or a file past
// the bound without being read whole (before, each was read with
// os.ReadFile: /dev/zero until memory ran out, a pipe for ever).
func TestRankFileIsBoundedAndNeverBlocks(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ranks.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := LoadRankFile(path, ""); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s: %v; want it refused as not a regular file", path, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: still reading after a minute", path)
		}
	}
}

// TestRankFileLongRunsAreCut: a rank file with a pattern of its own is
// encoded by tiktoken-go, whose merge costs the square of a piece: a word
// of a mebibyte is cut into runs of maxRegexpRun (it did not finish in
// minutes before), while text without such a run counts exactly as
// tiktoken-go does.
func TestRankFileLongRunsAreCut(t *testing.T) {
	raw, err := assets.Assets.ReadFile("cl100k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.model")
	os.WriteFile(path, raw, 0o644)
	tok, err := LoadRankFile(path, `\S+|\s+`)
	if err != nil {
		t.Fatal(err)
	}
	text := "plain words, " + strings.Repeat("w", 3000) + " and more\n"
	enc, err := tok.enc()
	if err != nil {
		t.Fatal(err)
	}
	truth := enc.(regexpEncoder).enc.EncodeOrdinary(text)
	if n := tok.Count(text); n != len(truth) {
		t.Errorf("text without a long run counts %d, tiktoken-go %d", n, len(truth))
	}
	done := make(chan int, 1)
	go func() { done <- tok.Count(strings.Repeat("abcdefgh", 1<<17)) }()
	select {
	case n := <-done:
		if n <= 0 {
			t.Errorf("%d tokens", n)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("a 1 MiB word did not count in 2 minutes")
	}
}
