// Package memcap runs a test's body in a child process whose address space
// is capped, so that a test of a memory bound fails when the bound breaks
// instead of exhausting the machine that runs it.
//
// The cap is a budget on top of what the child's address space holds when
// the body starts (a Go binary reserves over a gigabyte before its first
// allocation), set with RLIMIT_AS: a body that allocates past it dies of
// "out of memory", and the parent test fails saying so.
package memcap

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// envChild holds "budget:test" in a child process: the test it runs capped
// and the cap's budget in bytes.
const envChild = "SERVETRACE_MEMCAP_CHILD"

// Run runs body under a cap of budget bytes of address space beyond the
// child's at start. In the parent it starts the test binary again for this
// test alone and fails t with the child's output when the child fails; in
// that child it caps itself and runs body. Under the race detector, whose
// shadow memory has nothing to do with the bound under test, it skips: the
// capped tests are named TestLong* and run without -race in make test.
func Run(t *testing.T, budget int64, body func(t *testing.T)) {
	t.Helper()
	if v := os.Getenv(envChild); v != "" {
		b, name, _ := strings.Cut(v, ":")
		if name != t.Name() {
			t.Skipf("memcap: this child runs %s only", name)
		}
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			t.Fatalf("memcap: bad budget %q", b)
		}
		if err := capSelf(n); err != nil {
			t.Fatalf("memcap: %v", err)
		}
		body(t)
		return
	}
	if raceEnabled {
		t.Skip("memcap: capped tests run without -race (make test-timing's long checks)")
	}
	// The child's threads take 1 MiB stacks and glibc one arena: with cgo
	// linked, each new thread would otherwise reserve an 8 MiB stack and a
	// 64 MiB arena, address space the body never uses, and a body that
	// happened to start threads would fail a budget it kept.
	args := []string{"-test.run=" + runPattern(t.Name()), "-test.count=1", "-test.v"}
	cmd := exec.Command("/bin/sh", append([]string{"-c", `ulimit -s 1024 && exec "$0" "$@"`, os.Args[0]}, args...)...)
	if _, err := os.Stat("/bin/sh"); err != nil {
		cmd = exec.Command(os.Args[0], args...)
	}
	cmd.Env = append(os.Environ(), envChild+"="+strconv.FormatInt(budget, 10)+":"+t.Name(), "MALLOC_ARENA_MAX=1")
	// A child whose test binary is killed (go test's -timeout) dies with
	// it rather than spinning on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	ran := bytes.Contains(out, []byte("=== RUN   "+t.Name()+"\n"))
	switch {
	case err != nil && OutOfMemory(out):
		t.Fatalf("the body exceeded its memory cap of %d MiB:\n%s", budget>>20, tail(out))
	case err != nil:
		t.Fatalf("capped child failed (%v):\n%s", err, tail(out))
	case !ran:
		t.Fatalf("capped child did not run %s:\n%s", t.Name(), tail(out))
	}
	if testing.Verbose() {
		t.Logf("capped child (%d MiB):\n%s", budget>>20, tail(out))
	}
}

// OutOfMemory reports whether a Go process's output shows it died of
// exhausted memory.
func OutOfMemory(out []byte) bool {
	return bytes.Contains(out, []byte("fatal error: out of memory")) ||
		bytes.Contains(out, []byte("runtime: out of memory")) ||
		bytes.Contains(out, []byte("cannot allocate memory"))
}

// runPattern is the -test.run pattern that matches the test named name
// (subtests included) and nothing else.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// capSelf limits this process's address space to what it holds now plus
// budget bytes.
func capSelf(budget int64) error {
	now, err := vmSize()
	if err != nil {
		return err
	}
	lim := now + uint64(budget)
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim})
}

// vmSize is this process's address space in bytes (VmSize in
// /proc/self/status).
func vmSize() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read the address space's size: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return kb << 10, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no VmSize in /proc/self/status")
}

// tail is the last 60 lines of out, where a child's failure is.
func tail(out []byte) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > 60 {
		lines = append([]string{"..."}, lines[len(lines)-60:]...)
	}
	return strings.Join(lines, "\n")
}
