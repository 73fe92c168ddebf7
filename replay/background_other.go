//go:build !linux

package replay

// inBackground runs f: where a thread's priority cannot be set alone
// (Linux's nice is per thread), results are encoded as before.
func inBackground(f func()) { f() }

// backgroundThread runs functions on the caller's goroutine where a
// thread's priority cannot be set alone.
type backgroundThread struct{}

func newBackgroundThread() *backgroundThread { return &backgroundThread{} }
func (*backgroundThread) run(f func())       { f() }
func (*backgroundThread) close()             {}
