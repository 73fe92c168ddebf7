package trace

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// repeatedManifest is a manifest of about size bytes whose field holds
// elem again and again: JSON of a few bytes a value that decodes into tens
// of bytes each.
func repeatedManifest(field, open, elem, close string, size int) []byte {
	head := `{"schema_version":1,"kind":"trace","` + field + `":` + open
	n := (size - len(head)) / (len(elem) + 1)
	b := make([]byte, 0, len(head)+n*(len(elem)+1)+len(close)+1)
	b = append(b, head...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, elem...)
	}
	return append(append(b, close...), '}')
}

// TestLongManifestCountsAreBoundedBeforeDecoding (issue 46): manifests of
// 16 MB, within the 256 MiB a manifest may take, whose lists hold millions
// of empty entries, are refused by what they hold before they are decoded,
// within 256 MiB; decoded, they take gigabytes (40 bytes a part, 104 a
// source, 40 an empty list of the generator's settings).
func TestLongManifestCountsAreBoundedBeforeDecoding(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		for _, c := range []struct {
			name, field, open, elem, close, want string
		}{
			{"parts", "parts", "[", "{}", "]", "parts, more than the 1048576"},
			{"sources", "sources", "[", "{}", "]", "sources, more than the 65536"},
			{"generator", "generator", `{"a":[`, "[]", "]}", "generator settings of"},
		} {
			t.Run(c.name, func(t *testing.T) {
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, ManifestName), repeatedManifest(c.field, c.open, c.elem, c.close, 16<<20), 0o644); err != nil {
					t.Fatal(err)
				}
				_, err := ReadManifest(dir)
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ManifestName) {
					t.Fatalf("ReadManifest = %v; want a refusal naming the manifest and %q", err, c.want)
				}
			})
		}
	})
}

// TestManifestCountsAreBounded: a manifest past a bound on what it lists is
// refused by name, one at the bound is read.
func TestManifestCountsAreBounded(t *testing.T) {
	for _, c := range []struct {
		name, field, open, elem, close string
		n                              int
		want                           string
	}{
		{"notes", "notes", "[", `"n#"`, "]", MaxManifestNotes + 1, "notes, more than the 65536"},
		{"reject reasons", "reject_reasons", "{", `"r#":1`, "}", 1 << 17, "reject reasons of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var b bytes.Buffer
			b.WriteString(`{"schema_version":1,"kind":"trace","` + c.field + `":` + c.open)
			for i := range c.n {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strings.ReplaceAll(c.elem, "#", fmt.Sprint(i)))
			}
			b.WriteString(c.close + "}")
			os.WriteFile(filepath.Join(dir, ManifestName), b.Bytes(), 0o644)
			if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ReadManifest = %v; want a refusal saying %q", err, c.want)
			}
		})
	}
	dir := t.TempDir()
	m := &Manifest{Kind: "trace", Notes: make([]string, MaxManifestNotes), Parts: make([]Part, 1000)}
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadManifest(dir); err != nil || len(got.Notes) != MaxManifestNotes || len(got.Parts) != 1000 {
		t.Fatalf("a manifest at the bounds: %v", err)
	}
}

// TestLongManifestRowsOnlyPresize: a bucket of 3 rows whose manifest says
// 2^40 is read in full within 256 MiB: its count presizes within reason.
// Before, ReadAll made room for up to 1M rows, 632 MB, from the
// manifest's word alone.
func TestLongManifestRowsOnlyPresize(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		dir := t.TempDir()
		writeBucket(t, dir, WriterOptions{}, sampleRequests(3))
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		m.Rows = 1 << 40
		if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
			t.Fatal(err)
		}
		if rows, _, err := ReadAll(context.Background(), dir); err != nil || len(rows) != 3 {
			t.Errorf("read %d rows, %v; want 3", len(rows), err)
		}
	})
}
