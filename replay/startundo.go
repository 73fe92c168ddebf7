package replay

import (
	"os"
	"path/filepath"
)

// startUndo is what a run made before it started (its listeners, run
// dir, files), to be unmade, last first, should it not start: a run that
// cannot start leaves nothing behind and nothing running. It removes
// only what this run created, and a directory only when empty.
type startUndo struct {
	steps []func()
}

// dirs records dir and those of its parents that are missing now, before
// the run creates them.
func (u *startUndo) dirs(dir string) {
	var missing []string // deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		u.then(func() { os.Remove(d) }) // fails, harmlessly, on a directory not empty
	}
}

// file records a file the run created.
func (u *startUndo) file(path string) { u.then(func() { os.Remove(path) }) }

// then records a step that unmakes something (closes a listener).
func (u *startUndo) then(step func()) { u.steps = append(u.steps, step) }

// run unmakes everything recorded, last first.
func (u *startUndo) run() {
	for i := len(u.steps) - 1; i >= 0; i-- {
		u.steps[i]()
	}
	u.steps = nil
}
