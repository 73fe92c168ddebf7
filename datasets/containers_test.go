package datasets

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// azureMine is the plain text of azure_bzip2.csv and azure_xz.csv: a small
// Azure-trace-shaped CSV written for these tests.
const azureMine = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.125,100,5\n2024-05-10 00:00:01.5,2048,64\n2024-05-10 00:00:03,17,300\n"

// TestContainersAreNamed: what a file is, by its first bytes, whatever its
// name. gzip, zstd and bzip2 read as they are; a Git LFS pointer (the
// pointer format of git-lfs's docs/spec.md) and xz or zip files fail,
// saying what the file is and what to do, even with the format named; a
// compressed file whose name does not say so is told so.
func TestContainersAreNamed(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var gz, zs, zp bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(azureMine))
	zw.Close()
	enc, _ := zstd.NewWriter(&zs)
	enc.Write([]byte(azureMine))
	enc.Close()
	arch := zip.NewWriter(&zp)
	f, _ := arch.Create("azure.csv")
	f.Write([]byte(azureMine))
	arch.Close()
	// gzip of gzip: a file compressed twice.
	var gz2 bytes.Buffer
	zw = gzip.NewWriter(&gz2)
	zw.Write(gz.Bytes())
	zw.Close()
	for _, c := range []struct {
		name, path, format string
		rows               int64
		errIs              error
		want               []string // in the error
	}{
		{"gzip named .csv", write("gz.csv", gz.Bytes()), "", 3, nil, nil},
		{"zstd named .csv", write("zs.csv", zs.Bytes()), "", 3, nil, nil},
		{"bzip2 named .csv", "testdata/logs/azure_bzip2.csv", "", 3, nil, nil},
		{"gzip twice", write("gz2.csv.gz", gz2.Bytes()), "", 3, nil, nil},
		{"xz named .csv", "testdata/logs/azure_xz.csv", "", 0, ErrNotData, []string{"azure_xz.csv", "xz-compressed (its name does not say so)", "xz -d"}},
		{"xz named .xz", write("a.csv.xz", mustRead(t, "testdata/logs/azure_xz.csv")), "azure", 0, ErrNotData, []string{"xz-compressed: decompress"}},
		{"zip named .csv", write("z.csv", zp.Bytes()), "", 0, ErrNotData, []string{"zip-compressed (its name does not say so)", "unzip it"}},
		{"truncated gzip named .csv", write("cut.csv", gz.Bytes()[:gz.Len()-12]), "", 0, nil, []string{"cut.csv: gzip-compressed input (its name does not say so)", "truncated or corrupt?"}},
		{"LFS pointer, detected", "testdata/logs/lfs_pointer.csv", "", 0, ErrNotData, []string{"lfs_pointer.csv", "a Git LFS pointer (to 188113737 bytes, sha256 5b0e7c1f3a9d…)", "git lfs pull", "download the real file"}},
		{"LFS pointer, --format burstgpt", "testdata/logs/lfs_pointer.csv", FormatBurstGPT, 0, ErrNotData, []string{"Git LFS pointer", "git lfs pull"}},
		{"LFS pointer, --format openai-log", "testdata/logs/lfs_pointer.csv", FormatOpenAILog, 0, ErrNotData, []string{"Git LFS pointer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, err := os.Open(c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			var sink memSink
			st, err := Read(context.Background(), in, Options{Name: c.path, Format: c.format}, &sink)
			if c.want == nil {
				if err != nil || st.Rows != c.rows || sink.rows[2].OutputTokens != 300 {
					t.Fatalf("%d rows, %v; want %d", st.Rows, err, c.rows)
				}
				return
			}
			if err == nil || c.errIs != nil && !errors.Is(err, c.errIs) {
				t.Fatalf("error %v; want %v", err, c.errIs)
			}
			if errors.Is(err, ErrUnknownFormat) {
				t.Errorf("%v is ErrUnknownFormat, whose hint (name the format) would mislead", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDetectHeads: Detect reads a head, not just a line: JSON documents
// that span lines, arrays of records, and what is not data at all.
func TestDetectHeads(t *testing.T) {
	for _, c := range []struct {
		name, head, want string
		errIs            error
	}{
		{"pretty LiteLLM", "{\n  \"id\": \"x\",\n  \"startTime\": 1740823200.0,\n  \"model\": \"m\"\n}\n", FormatOpenAILog, nil},
		{"array of logs", "[\n  {\n    \"request\": {}\n  }\n]", FormatOpenAILog, nil},
		{"array of conversations", `[{"id": 1, "conversations": []}]`, FormatShareGPT, nil},
		{"empty array", "[]", FormatShareGPT, nil},
		{"batch output", `{"id": "b", "custom_id": "r", "response": null, "error": {"code": "x"}}`, FormatOpenAIBatch, nil},
		{"batch input", `{"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "body": {}}`, "", ErrBatchInput},
		{"array of Mooncake", `[{"timestamp": 0, "input_length": 5}]`, "", ErrUnknownFormat},
		{"cut JSON", "{\n  \"request\": {", "", ErrUnknownFormat},
		{"LFS pointer", lfsPointerLine + "\noid sha256:" + strings.Repeat("ab", 32) + "\nsize 12\n", "", ErrNotData},
		{"xz", "\xfd7zXZ\x00\x00\x04", "", ErrNotData},
		{"text starting BZh", "BZh is not bzip2\n", "", ErrUnknownFormat},
	} {
		got, err := Detect([]byte(c.head))
		if got != c.want || (c.errIs == nil) != (err == nil) || c.errIs != nil && !errors.Is(err, c.errIs) {
			t.Errorf("%s: %q, %v; want %q, %v", c.name, got, err, c.want, c.errIs)
		}
	}
	// A head that ends inside a long first document is classified by the
	// keys seen so far, where more input follows.
	if got, err := detect([]byte("{\n  \"model_parameters\": {}, \"messages\": [\"very long"), false, ""); got != FormatOpenAILog {
		t.Errorf("cut head: %q, %v", got, err)
	}
}
