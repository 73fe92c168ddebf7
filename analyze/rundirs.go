package analyze

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ExpandRunDirs expands one side of a comparison or a sweep argument: a run
// directory, a comma-separated list of them, or a directory whose
// subdirectories are run directories.
func ExpandRunDirs(arg string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(arg, ",") {
		if p == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "run.json")); err == nil {
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("%s: not a run directory (no run.json) and not readable as a directory of runs: %w", p, err)
		}
		found := 0
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(p, e.Name(), "run.json")); e.IsDir() && err == nil {
				out = append(out, filepath.Join(p, e.Name()))
				found++
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: no run.json in it or in its subdirectories: give a run directory written by servetrace replay", p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no run directory", arg)
	}
	return out, nil
}
