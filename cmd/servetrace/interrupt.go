package main

import "context"

// interruptible runs work and returns its result, or ctx's error as soon as
// ctx ends (SIGINT, SIGTERM). For work that writes nothing until it
// returns, abandoning it leaves nothing half-made, and the command stops at
// once instead of at the library's next check.
func interruptible[T any](ctx context.Context, work func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := work()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
