//go:build !unix

package regfile

import "os"

// open checks path before opening it, where the system has no
// non-blocking open: a pipe put in its place between the two can still
// block.
func open(path string) (*os.File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return os.Open(path)
}
