package datasets

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

type discard struct{}

func (discard) Write(trace.Request) error { return nil }
func (discard) Reject(trace.Reject) error { return nil }

func BenchmarkReadAzure(b *testing.B) {
	d, _ := Lookup("azure-code-2023")
	b.SetBytes(int64(len(d.Bytes())))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(context.Background(), d.Open(), Options{Name: d.File}, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8819*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkReadMooncake(b *testing.B) {
	d, _ := Lookup("mooncake-synthetic")
	b.SetBytes(int64(len(d.Bytes())))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(context.Background(), d.Open(), Options{Name: d.File}, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(3993*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// benchLog builds n request-log lines with chat messages of about 1 kB of
// text each, half of them without usage (so the tokenizer counts).
func benchLog(n int) []byte {
	var sb strings.Builder
	para := strings.Repeat("The quick brown fox jumps over the lazy dog while the committee reviews the quarterly numbers. ", 10)
	for i := range n {
		usage := ""
		if i%2 == 0 {
			usage = `,"usage":{"prompt_tokens":250,"completion_tokens":40}`
		}
		fmt.Fprintf(&sb, `{"id":"r%d","timestamp":%d.5,"end_time":%d.9,"user":"u%d","status":200,"request":{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"%s %d"}]},"response":{"choices":[{"message":{"content":"Sure, here it is."},"finish_reason":"stop"}]%s}}`+"\n",
			i, 1740823200+i, 1740823200+i, i%50, para, i, usage)
	}
	return []byte(sb.String())
}

// BenchmarkReadOpenAILog converts request logs with text: JSON decoding,
// tokenizing every prompt for its prefix blocks (and its length where usage
// is missing), salted hashing and session linking. Reports MB/s and rows/s.
func BenchmarkReadOpenAILog(b *testing.B) {
	data := benchLog(2000)
	m, _ := LoadMapping("openai")
	salt := testSalt(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(context.Background(), bytes.NewReader(data), Options{Name: "bench", Format: FormatOpenAILog, Log: LogOptions{Mapping: m, Salt: salt}}, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2000*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkConvertAzure is the whole conversion of the bundled Azure
// sample: CSV parsing, hour partitioning, sorting, Parquet (zstd) writing
// and the manifest. Reports rows/s.
func BenchmarkConvertAzure(b *testing.B) {
	d, _ := Lookup("azure-code-2023")
	b.SetBytes(int64(len(d.Bytes())))
	b.ReportAllocs()
	for b.Loop() {
		out := filepath.Join(b.TempDir(), "b")
		if _, err := Convert(context.Background(), []string{"azure-code-2023"}, out, ConvertOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8819*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkConvertAzureLarge converts 500,000 Azure-format rows (20 per
// second over about seven hours), where per-file setup no longer dominates.
func BenchmarkConvertAzureLarge(b *testing.B) {
	in := filepath.Join(b.TempDir(), "azure.csv")
	writeAzureCSV(b, in, 500_000)
	b.ReportAllocs()
	for b.Loop() {
		out := filepath.Join(b.TempDir(), "b")
		if _, err := Convert(context.Background(), []string{in}, out, ConvertOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(500_000*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkReadOTLP converts OpenTelemetry GenAI spans (the genai fixture's
// four exports, 500 times over under fresh trace ids): JSON walking,
// attribute decoding, session linking. Reports MB/s and spans/s.
func BenchmarkReadOTLP(b *testing.B) {
	fixture, err := os.ReadFile("testdata/otlp/genai.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	const copies = 500
	for k := range copies {
		doc := regexp.MustCompile(`"traceId":"[0-9a-f]{8}`).ReplaceAll(fixture, []byte(fmt.Sprintf(`"traceId":"%08x`, k)))
		buf.Write(doc)
	}
	data := buf.Bytes()
	spans := copies * bytes.Count(fixture, []byte(`"spanId"`))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(context.Background(), bytes.NewReader(data), Options{Name: "bench", Format: FormatOTLP}, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(spans*b.N)/b.Elapsed().Seconds(), "spans/s")
}
