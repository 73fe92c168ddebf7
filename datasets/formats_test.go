package datasets

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// memSink collects rows and rejects in memory.
type memSink struct {
	rows    []trace.Request
	rejects []trace.Reject
}

func (s *memSink) Write(r trace.Request) error { s.rows = append(s.rows, r); return nil }
func (s *memSink) Reject(r trace.Reject) error { s.rejects = append(s.rejects, r); return nil }

func TestAzureSampleConvertsEveryRow(t *testing.T) {
	d, _ := Lookup("azure-code-2023")
	var sink memSink
	st, err := Read(context.Background(), d.Open(), Options{Name: d.File}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != FormatAzure || st.Rows != 8819 || len(sink.rows) != 8819 || st.Rejects != 0 {
		t.Fatalf("format %s, %d rows (%d in sink), %d rejects; want azure, 8819, 0", st.Format, st.Rows, len(sink.rows), st.Rejects)
	}
	// First and last rows, checked against the CSV text by hand.
	first, last := sink.rows[0], sink.rows[len(sink.rows)-1]
	wantFirst := time.Date(2023, 11, 16, 18, 17, 3, 979960000, time.UTC)
	if !first.Time().Equal(wantFirst) || first.InputTokens != 4808 || first.OutputTokens != 10 {
		t.Errorf("first row %v %d/%d, want %v 4808/10", first.Time(), first.InputTokens, first.OutputTokens, wantFirst)
	}
	if last.InputTokens != 549 || last.OutputTokens != 173 {
		t.Errorf("last row %d/%d, want 549/173", last.InputTokens, last.OutputTokens)
	}
	// The trace covers one hour: first to last arrival 3,436 s, read off
	// the CSV with awk (independent of this reader).
	span := last.Time().Sub(first.Time()).Seconds()
	if span < 3430 || span > 3440 {
		t.Errorf("trace spans %.0f s, want about 3436", span)
	}
	if st.TimeResolutionUs > 10 {
		t.Errorf("time resolution %d µs; the Azure trace has sub-10µs timestamps", st.TimeResolutionUs)
	}
	if d.Rows() != 8819 {
		t.Errorf("Dataset.Rows() = %d", d.Rows())
	}
}

func TestMooncakeSampleKeepsPrefixBlocks(t *testing.T) {
	d, _ := Lookup("mooncake-synthetic")
	var sink memSink
	start := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
	st, err := Read(context.Background(), d.Open(), Options{Name: d.File, Start: start}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 3993 || st.Rejects != 0 || !st.TimesRelative || st.BlockSize != 512 {
		t.Fatalf("stats %+v; want 3993 rows, relative times, block 512", st)
	}
	if st.TimeResolutionUs != 1000 {
		t.Errorf("time resolution %d µs, want 1000 (ms timestamps)", st.TimeResolutionUs)
	}
	// Compare with an independent parse of the same file.
	sc := bufio.NewScanner(d.Open())
	sc.Buffer(nil, 1<<20)
	for i := 0; sc.Scan(); i++ {
		var raw struct {
			Timestamp   int64   `json:"timestamp"`
			InputLength int64   `json:"input_length"`
			HashIDs     []int64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		got := sink.rows[i]
		if got.TS != start.UnixMicro()+raw.Timestamp*1000 {
			t.Fatalf("row %d: ts %v, want start + %d ms", i, got.Time(), raw.Timestamp)
		}
		if int64(len(got.PrefixBlocks)) != (got.InputTokens+511)/512 {
			t.Fatalf("row %d: %d prefix blocks for %d tokens", i, len(got.PrefixBlocks), got.InputTokens)
		}
		for j := range raw.HashIDs {
			if got.PrefixBlocks[j] != raw.HashIDs[j] {
				t.Fatalf("row %d block %d: %d, want %d", i, j, got.PrefixBlocks[j], raw.HashIDs[j])
			}
		}
	}
}

func TestDetect(t *testing.T) {
	cases := []struct {
		line, want string
	}{
		{"TIMESTAMP,ContextTokens,GeneratedTokens", FormatAzure},
		{"\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r", FormatAzure}, // BOM and CRLF
		{`{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}`, FormatMooncake},
		{`{"timestamp": 0, "input_length": 5}`, FormatMooncake},
		{`{"model": "x"}`, ""},     // JSON, but not a format we know
		{"a,b,c", ""},              // CSV, but not Azure's header
		{"", ""},                   // empty
		{"\x00\x01\x02binary", ""}, // binary
	}
	for _, c := range cases {
		got, err := Detect([]byte(c.line))
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("Detect(%q) = %q, %v; want %q", c.line, got, err, c.want)
		}
		if err != nil && !errors.Is(err, ErrUnknownFormat) {
			t.Errorf("Detect(%q) error %v is not ErrUnknownFormat", c.line, err)
		}
	}
}

func TestCorruptLinesAreRejectedWithLineNumbers(t *testing.T) {
	azure := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2024-05-10 00:00:00.0099300,100,5\n" + // line 2: fine
		"not a time,100,5\n" + // line 3
		"2024-05-10 00:00:01,abc,5\n" + // line 4
		"2024-05-10 00:00:02,-3,5\n" + // line 5
		"2024-05-10 00:00:03\n" + // line 6: too few fields
		"2024-05-10 00:00:04+00:00,7,8\n" // line 7: 2024 style with zone, fine
	mooncake := `{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}` + "\n" +
		`{"timestamp": 5, "input_length": 600` + "\n" + // line 2: truncated
		`{"timestamp": 6, "input_length": 600, "output_length": 1, "hash_ids": [1]}` + "\n" + // 3: wrong block count
		"\n" + // line 4: blank, skipped silently
		`{"timestamp": 7, "output_length": 1}` + "\n" + // 5: missing input_length
		`{"timestamp": 8, "input_length": "x", "output_length": 1}` + "\n" // 6: wrong type
	cases := []struct {
		name        string
		input       string
		rows        int
		rejectLines []int64
	}{
		{"azure", azure, 2, []int64{3, 4, 5, 6}},
		{"mooncake", mooncake, 1, []int64{2, 3, 5, 6}},
	}
	for _, c := range cases {
		var sink memSink
		st, err := Read(context.Background(), strings.NewReader(c.input), Options{Name: "in." + c.name}, &sink)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if int(st.Rows) != c.rows || len(sink.rows) != c.rows {
			t.Errorf("%s: %d rows, want %d", c.name, st.Rows, c.rows)
		}
		var lines []int64
		for _, r := range sink.rejects {
			lines = append(lines, r.Line)
			if r.File != "in."+c.name || r.Reason == "" {
				t.Errorf("%s: reject %+v lacks file or reason", c.name, r)
			}
			if strings.Contains(r.Reason, "abc") || strings.Contains(r.Reason, "not a time") {
				t.Errorf("%s: reject reason quotes the input: %q", c.name, r.Reason)
			}
		}
		if !slices.Equal(lines, c.rejectLines) {
			t.Errorf("%s: rejected lines %v, want %v", c.name, lines, c.rejectLines)
		}
	}
}

func TestGzipInputAndHugeLine(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(datasetHead(t, "azure-code-2023", 11))
	zw.Close()
	var sink memSink
	st, err := Read(context.Background(), &buf, Options{Name: "x.csv.gz"}, &sink)
	if err != nil || st.Rows != 10 {
		t.Fatalf("gzip input: %d rows, %v; want 10", st.Rows, err)
	}

	huge := `{"timestamp": 0, "input_length": 1, "output_length": 1}` + "\n" +
		`{"timestamp": 1, "input_length": 1, "output_length": 1, "pad": "` + strings.Repeat("x", MaxLineBytes) + `"}` + "\n" +
		`{"timestamp": 2, "input_length": 1, "output_length": 1}` + "\n"
	sink = memSink{}
	st, err = Read(context.Background(), strings.NewReader(huge), Options{Name: "huge.jsonl"}, &sink)
	if err != nil || st.Rows != 2 || len(sink.rejects) != 1 || sink.rejects[0].Line != 2 {
		t.Fatalf("huge line: %+v, rejects %+v, %v; want 2 rows and line 2 rejected", st, sink.rejects, err)
	}
}

func TestUnknownFormatIsAnErrorNotRejects(t *testing.T) {
	var sink memSink
	_, err := Read(context.Background(), strings.NewReader("name,age\nbob,3\n"), Options{Name: "people.csv"}, &sink)
	if err == nil || !strings.Contains(err.Error(), "people.csv line 1") || !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("err = %v; want it to name the file, line 1 and be ErrUnknownFormat", err)
	}
	if _, err := Read(context.Background(), strings.NewReader("x"), Options{Name: "f", Format: "parquet"}, &sink); err == nil || !strings.Contains(err.Error(), "azure, mooncake") {
		t.Fatalf("unknown --format: %v", err)
	}
}

func TestAttributionNamesBothSources(t *testing.T) {
	a := Attribution()
	for _, want := range []string{"Splitwise", "CC-BY 4.0", "Mooncake", "Apache"} {
		if !strings.Contains(a, want) {
			t.Errorf("attribution lacks %q", want)
		}
	}
}

func datasetHead(t *testing.T, name string, lines int) []byte {
	d, ok := Lookup(name)
	if !ok {
		t.Fatalf("no dataset %s", name)
	}
	var out []byte
	for i, l := range bytes.SplitAfter(d.Bytes(), []byte("\n")) {
		if i == lines {
			break
		}
		out = append(out, l...)
	}
	return out
}

// TestFastAzureTimeMatchesTimeParse checks the fast timestamp parser against
// time.Parse on valid, edge and broken inputs: where the fast path answers,
// it must agree exactly.
func TestFastAzureTimeMatchesTimeParse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []string{"2023-11-16 18:17:03.9799600", "2023-11-16 18:17:03", "2024-02-29 23:59:59.123456789", "2023-02-29 00:00:00",
		"1900-02-29 00:00:00", "2000-02-29 12:00:00", "1969-12-31 23:59:59.9999999", "0400-03-01 00:00:00", "9999-12-31 23:59:59",
		"2023-11-16 24:00:00", "2023-11-16 18:17:03.", "2023-11-16 18:17:03.1234567890", "2023-13-01 00:00:00", "2023-11-16T18:17:03.5", "0000-01-01 00:00:00"}
	for range 20000 {
		b := []byte("2023-11-16 18:17:03.9799600")
		for range 1 + rng.IntN(3) {
			b[rng.IntN(len(b))] = "0123456789:-. 9"[rng.IntN(15)]
		}
		cases = append(cases, string(b[:rng.IntN(len(b)+1)]))
	}
	for _, s := range cases {
		fast, ok := fastAzureTime(s)
		if !ok {
			continue
		}
		slow, err := time.Parse("2006-01-02 15:04:05.999999999", s)
		if err != nil || slow.UnixMicro() != fast {
			t.Fatalf("%q: fast %d µs, time.Parse %d (%v)", s, fast, slow.UnixMicro(), err)
		}
	}
}
