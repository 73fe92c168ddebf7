package main

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLayering holds every package to the import table of
// docs/architecture.md: arrows point down, nothing imports cmd, and no
// library imports a sibling on its own level.
func TestLayering(t *testing.T) {
	const module = "github.com/servetrace/servetrace/"
	internal := []string{"internal/rank", "internal/hashmix", "internal/promtext", "internal/opterr", "internal/termsafe", "internal/media", "internal/loghist", "internal/procstat", "internal/regfile", "internal/servermetrics", "internal/traceid", "internal/llmspan", "internal/memcap"}
	allowed := map[string][]string{
		"internal/rank": nil, "internal/hashmix": nil, "internal/promtext": nil, "internal/opterr": nil, "internal/termsafe": nil, "internal/media": nil, "internal/loghist": nil, "internal/procstat": nil, "internal/regfile": nil, "internal/servermetrics": nil, "internal/traceid": nil, "internal/llmspan": nil, "internal/memcap": nil,
		"tokenize":        {"internal/regfile"},
		"trace/anon":      nil,
		"trace/arrowread": nil, // no code; its test imports trace
		"trace/tracetest": {"trace"},
		"trace":           internal,
		"datasets":        append([]string{"trace", "trace/anon", "tokenize"}, internal...),
		"synth":           append([]string{"trace"}, internal...),
		"replay":          append([]string{"trace", "trace/anon", "tokenize", "replay/chunk", "replay/h1", "replay/scrub", "replay/pacing", "replay/probe", "spans"}, internal...),
		"replay/scrub":    internal,
		"replay/pacing":   nil,
		"spans":           {"trace", "internal/traceid", "internal/regfile", "internal/llmspan"},
		"replay/h1":       nil,
		"replay/chunk":    nil,
		"replay/probe":    internal,
		"replay/sim":      append([]string{"trace", "tokenize", "replay/probe", "replay/scrub"}, internal...),
		"analyze":         append([]string{"trace", "analyze/peer"}, internal...),
		"analyze/peer":    {"trace", "internal/regfile"},
		"sweep":           append([]string{"trace", "replay", "analyze"}, internal...),
	}
	root := filepath.Join("..", "..")
	for pkg, may := range allowed {
		p, err := build.ImportDir(filepath.Join(root, pkg), 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if !slices.Contains(may, dep) {
				t.Errorf("%s imports %s, which docs/architecture.md does not allow (it may import %v)", pkg, dep, may)
			}
		}
	}
	// Every package of the module but cmd is in the table, so a new one
	// must be placed in it (and in the doc).
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		base := d.Name()
		if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || rel == "cmd" || rel == "interop" || rel == "deploy") {
			return filepath.SkipDir
		}
		if bp, err := build.ImportDir(p, 0); err == nil && len(bp.GoFiles) > 0 && bp.Name != "main" {
			if _, ok := allowed[rel]; !ok {
				t.Errorf("package %s is not in the layering table: add it here and to docs/architecture.md", rel)
			}
		}
		return nil
	})
}
