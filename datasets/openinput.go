package datasets

import (
	"context"
	"os"
)

// openInput opens an input path for reading in a way a cancelled context
// ends. Inputs may be named pipes (a shell's process substitution, a
// pipe from another program): opening one waits for a writer and reading
// it for data, neither of which looks at a context, so SIGINT would go
// unheard. The open runs aside and is abandoned when ctx ends, and the
// file is closed when ctx ends, which ends a read that waits.
func openInput(ctx context.Context, path string) (f *os.File, stop func(), err error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, nil, o.err
		}
		unhook := context.AfterFunc(ctx, func() { o.f.Close() })
		return o.f, func() { unhook(); o.f.Close() }, nil
	case <-ctx.Done():
		go func() { // the open may still succeed: close what it opens
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
}
