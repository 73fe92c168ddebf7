//go:build !linux

package replay

// inBackground runs f: where a thread's priority cannot be set alone
// (Linux's nice is per thread), results are encoded as before.
func inBackground(f func()) { f() }
