package datasets

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/procstat"
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
	procstat.ReportPeak(os.Stdout)
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

// TestLongConvertHeapBounded: converting 2M rows through a 20k-row writer
// buffer must never hold more than a bounded live heap, because rows are
// spilled to sorted parts per hour and merged on read. The live heap after
// a forced collection depends on what the program holds, not on the
// machine's load (unlike RSS); holding every row would need about 600 MB.
func TestLongConvertHeapBounded(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: run by make test-timing")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	const rows, buffer = 2_000_000, 20_000
	writeAzureCSV(t, in, rows)
	runtime.GC()
	base := liveHeap()
	stop := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		var most uint64
		defer func() { peak <- most }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.GC()
				most = max(most, liveHeap())
			}
		}
	}()
	m, err := Convert(context.Background(), []string{in}, filepath.Join(dir, "out"), ConvertOptions{Writer: trace.WriterOptions{PartRows: buffer, MaxBufferedRows: buffer}})
	close(stop)
	most := <-peak
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != rows {
		t.Fatalf("converted %d rows, want %d", m.Rows, rows)
	}
	grew := int64(most) - int64(base)
	t.Logf("live heap: %d MB before, peak %d MB during the conversion of %d rows", base>>20, most>>20, rows)
	const bound = 100 << 20
	if grew > bound {
		t.Errorf("the live heap grew by %d MB converting %d rows through a %d-row buffer; want at most %d MB", grew>>20, rows, buffer, bound>>20)
	}
}

// liveHeap is the heap the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkConvertPeakRSS converts 500k and 5M rows in child processes and
// reports each one's peak RSS (the least of three runs) and their ratio:
// memory should follow the writer buffer, not the input. RSS moves with
// whatever else the machine runs, so this is a benchmark (make
// bench-convert-memory), not a test.
func BenchmarkConvertPeakRSS(b *testing.B) {
	dir := b.TempDir()
	const buffer = 50_000
	runs := 0
	peak := func(rows int) int64 {
		in := filepath.Join(dir, fmt.Sprintf("in-%d.csv", rows))
		if _, err := os.Stat(in); err != nil {
			writeAzureCSV(b, in, rows)
		}
		runs++
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), convertChildEnv+"="+in+"|"+filepath.Join(dir, fmt.Sprintf("out-%d-%d", rows, runs))+"|"+strconv.Itoa(buffer))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		kb := procstat.PeakFromOutput(out)
		if kb == 0 {
			b.Fatalf("no peak memory reported:\n%s", out)
		}
		return kb
	}
	least := func(rows int) int64 {
		kb := peak(rows)
		for range 2 {
			kb = min(kb, peak(rows))
		}
		return kb
	}
	for range b.N {
		one, ten := least(500_000), least(5_000_000)
		b.ReportMetric(float64(one), "peak-kB-500k")
		b.ReportMetric(float64(ten), "peak-kB-5M")
		b.ReportMetric(float64(ten)/float64(one), "ratio")
	}
}
