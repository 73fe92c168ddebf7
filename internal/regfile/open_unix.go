//go:build unix

package regfile

import (
	"os"
	"syscall"
)

// open opens path without waiting for a writer if it is a named pipe;
// O_NONBLOCK changes nothing for a regular file's reads.
func open(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
