package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBoundsTableNamesRealTests holds docs/architecture.md's table of
// bounds to the code: every test it names as holding a bound exists, so a
// renamed or deleted test cannot leave a bound claimed and unheld.
func TestBoundsTableNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "## Bounds on what servetrace reads")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "Bounds on what servetrace reads" section`)
	}
	section := text[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`").FindAllStringSubmatch(section, -1)
	if len(named) < 20 {
		t.Fatalf("the bounds section names %d tests; want one a bound", len(named))
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
				defined[m[1]] = true
			}
		}
		return nil
	})
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("docs/architecture.md's bounds name %s, which no test file defines", m[1])
		}
	}
}
