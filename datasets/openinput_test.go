package datasets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestInputPipesStopWhenCancelled: a named pipe given as an input or as
// the batch input, with no writer, or with a writer that sends nothing
// more, is abandoned once the context ends (before, os.Open waited for a
// writer for ever, SIGINT and SIGTERM unheard).
func TestInputPipesStopWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	noWriter := filepath.Join(dir, "nowriter")
	stalled := filepath.Join(dir, "stalled")
	for _, p := range []string{noWriter, stalled} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The stalled pipe's writer opens it, writes one line and stops.
	go func() {
		w, err := os.OpenFile(stalled, os.O_WRONLY, 0)
		if err == nil {
			w.WriteString(`{"a":1}` + "\n")
			time.Sleep(time.Minute)
			w.Close()
		}
	}()
	cases := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"input, no writer", func(ctx context.Context) error {
			_, err := Convert(ctx, []string{noWriter}, filepath.Join(dir, "out1"), ConvertOptions{Options: Options{Format: FormatCSV}})
			return err
		}},
		{"input, stalled writer", func(ctx context.Context) error {
			_, err := Convert(ctx, []string{stalled}, filepath.Join(dir, "out2"), ConvertOptions{Options: Options{Format: FormatCSV}})
			return err
		}},
		{"batch input, no writer", func(ctx context.Context) error {
			_, err := LoadBatchInput(ctx, noWriter)
			return err
		}},
	}
	for _, c := range cases {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.run(ctx) }()
		time.Sleep(100 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v; want the cancel", c.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: still waiting 30 s after the cancel", c.name)
		}
	}
}
