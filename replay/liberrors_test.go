package replay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoFlagNamesInLibraryStrings: replay, replay/sim and tokenize speak
// in their own terms (Options fields, typed errors); the CLI names flags.
// No string literal of their non-test files may hold "--".
func TestNoFlagNamesInLibraryStrings(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range []string{".", "sim", filepath.Join("..", "tokenize")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v files, %v", dir, len(files), err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(fset, f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, _ := strconv.Unquote(lit.Value); strings.Contains(s, "--") {
						t.Errorf("%s: %q names a flag", fset.Position(lit.Pos()), s)
					}
				}
				return true
			})
		}
	}
}
