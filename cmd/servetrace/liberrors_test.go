package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// flagRE matches a CLI flag as it would appear in a message: --name.
var flagRE = regexp.MustCompile(`(^|[^-\w])--[a-z][a-z0-9-]*`)

// TestLibraryErrorsNameNoFlag: the library packages report what is wrong
// in their own terms (the Options field, a typed error) and the CLI names
// the flag, so no error string built outside cmd/ may hold a flag. Every
// string literal given to fmt.Errorf, errors.New or opterr.New in a
// non-test file is checked; a flag of another tool (vLLM's
// --save-detailed) is allowed where it is named as that tool's.
func TestLibraryErrorsNameNoFlag(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var found []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == "cmd" || rel == "interop" || strings.HasPrefix(filepath.Base(p), ".") && rel != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || !(pkg.Name == "fmt" && sel.Sel.Name == "Errorf" || pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "opterr" && sel.Sel.Name == "New") {
				return true
			}
			for _, a := range call.Args {
				lit, ok := a.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				s, _ := strconv.Unquote(lit.Value)
				if flagRE.MatchString(s) && !strings.Contains(s, "vllm bench serve") {
					found = append(found, fset.Position(lit.Pos()).String()+": "+s)
				}
			}
			return true
		})
		return nil
	})
	for _, f := range found {
		t.Error(f)
	}
}
