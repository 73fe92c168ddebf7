//go:build !linux

package pacing

// BackgroundThread runs functions on the caller's goroutine where a
// thread's priority cannot be set alone (Linux's nice is per thread).
type BackgroundThread struct{}

// NewBackgroundThread returns a thread that runs functions where called.
func NewBackgroundThread() *BackgroundThread { return &BackgroundThread{} }

// Run runs f and returns when f has.
func (*BackgroundThread) Run(f func()) { f() }

// Close does nothing: there is no thread to end.
func (*BackgroundThread) Close() {}
