//go:build !linux

package replay

// backgroundThread runs functions on the caller's goroutine where a
// thread's priority cannot be set alone (Linux's nice is per thread).
type backgroundThread struct{}

func newBackgroundThread() *backgroundThread { return &backgroundThread{} }
func (*backgroundThread) run(f func())       { f() }
func (*backgroundThread) close()             {}
