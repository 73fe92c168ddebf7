package datasets

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// convertChildEnv makes the test binary run one conversion and print its
// peak resident memory (VmHWM), so the parent measures a clean process.
const convertChildEnv = "SERVETRACE_CONVERT_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(convertChildEnv); spec != "" {
		convertChild(spec)
		return
	}
	os.Exit(m.Run())
}

// convertChild converts "IN|OUT|ROWS" with a writer buffer of ROWS rows and
// prints "hwm_kb N".
func convertChild(spec string) {
	parts := strings.Split(spec, "|")
	rows, _ := strconv.Atoi(parts[2])
	_, err := Convert(context.Background(), []string{parts[0]}, parts[1], ConvertOptions{Writer: trace.WriterOptions{PartRows: rows, MaxBufferedRows: rows}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	status, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Println("hwm_kb", strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
}

// writeAzureCSV writes n Azure-format rows, 20 per second from a start.
func writeAzureCSV(t testing.TB, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		fmt.Fprintf(w, "%s,%d,%d\n", t0.Add(time.Duration(i)*50*time.Millisecond).Format("2006-01-02 15:04:05.0000000"), 100+i%4000, 1+i%300)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestLongConvertMemoryBounded: converting 10x the input must take at most
// 1.2x the peak memory of 1x (rows are spilled to sorted parts per hour and
// merged on read, so memory follows the buffer, not the input), each the
// least of three runs.
func TestLongConvertMemoryBounded(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long measurement: run by make test-timing")
	}
	dir := t.TempDir()
	const buffer = 50_000
	runs := 0
	peak := func(rows int) (int64, time.Duration) {
		in := filepath.Join(dir, fmt.Sprintf("in-%d.csv", rows))
		if _, err := os.Stat(in); err != nil {
			writeAzureCSV(t, in, rows)
		}
		runs++
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), convertChildEnv+"="+in+"|"+filepath.Join(dir, fmt.Sprintf("out-%d-%d", rows, runs))+"|"+strconv.Itoa(buffer))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var kb int64
		for line := range strings.Lines(string(out)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "hwm_kb "); ok {
				kb, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if kb == 0 {
			t.Fatalf("no peak memory reported:\n%s", out)
		}
		return kb, time.Since(start)
	}
	// The least of three runs: when the collector happens to run only adds
	// to a peak, so the minimum is the most repeatable measure of what a
	// conversion needs (single runs varied by about 10% here).
	least := func(rows int) (int64, time.Duration) {
		kb, d := peak(rows)
		for range 2 {
			if k, dd := peak(rows); k < kb {
				kb, d = k, dd
			}
		}
		return kb, d
	}
	one, d1 := least(500_000)
	ten, d10 := least(5_000_000)
	t.Logf("peak RSS: %d kB for 500k rows (%v), %d kB for 5M rows (%v): ratio %.2f", one, d1.Round(time.Millisecond), ten, d10.Round(time.Millisecond), float64(ten)/float64(one))
	if float64(ten) > 1.2*float64(one) {
		t.Errorf("10x the input took %.2fx the memory (%d kB vs %d kB); want at most 1.2x", float64(ten)/float64(one), ten, one)
	}
}
