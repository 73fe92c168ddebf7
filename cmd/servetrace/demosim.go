package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// simProcess is the simulator the demo runs as a child process: the
// replay client under test then shares no Go processor, heap or
// collector with the server it measures. In one process the simulator's
// tokenizer held a processor for the runtime's 10 ms preemption quantum
// while a collection marked its tables on the other, and the demo called
// its client saturated at 4% of its CPU (docs/measurements.md).
type simProcess struct {
	URL  string
	cmd  *exec.Cmd
	done chan error // the child's Wait
}

// simCommand returns the command that runs `servetrace <args>`: this
// executable; tests, whose executable is a test binary, replace it.
var simCommand = func(ctx context.Context, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to start the simulator: %w", err)
	}
	return exec.CommandContext(ctx, exe, args...), nil
}

// spanDelayEnv sets the OpenTelemetry SDK's batch span delay (ms).
const spanDelayEnv = "OTEL_BSP_SCHEDULE_DELAY"

// simServing is the line `servetrace sim` prints once it serves.
var simServing = regexp.MustCompile(`serving .* at (http://\S+), preset`)

// simStartTimeout bounds the wait for the child's serving line.
const simStartTimeout = 30 * time.Second

// startSimProcess starts `servetrace sim` with the flags given on a free
// loopback port and returns once it serves.
func startSimProcess(ctx context.Context, flags ...string) (*simProcess, error) {
	cmd, err := simCommand(ctx, append([]string{"sim", "--addr", "127.0.0.1:0"}, flags...)...)
	if err != nil {
		return nil, err
	}
	if os.Getenv(spanDelayEnv) == "" {
		// The span SDK's batch delay, 5 s by default, would hold a run's
		// end that long waiting for its last spans.
		cmd.Env = append(cmd.Environ(), spanDelayEnv+"=500")
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	p := &simProcess{cmd: cmd, done: make(chan error, 1)}
	started := make(chan error, 1)
	lines := make(chan string, 1)
	// Linux sends the parent-death signal when the thread that started
	// the child ends, not the process, and the Go runtime ends the thread
	// of a goroutine that exits locked to it (replay encodes results on
	// such threads): the child is started, and waited for, on a thread
	// held for its whole life.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		lines <- line
		io.Copy(io.Discard, br) // the child never blocks on a full pipe
		p.done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting the simulator: %w", err)
	}
	select {
	case line := <-lines:
		if m := simServing.FindStringSubmatch(line); m != nil {
			p.URL = m[1]
			return p, nil
		}
		p.stop()
		return nil, fmt.Errorf("the simulator did not start: %s", strings.TrimSpace(line+" "+stderr.String()))
	case <-time.After(simStartTimeout):
		p.stop()
		return nil, fmt.Errorf("the simulator did not report its address in %v", simStartTimeout)
	}
}

// stop ends the child (an interrupt, then a kill after 5 s) and waits
// for it.
func (p *simProcess) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}
