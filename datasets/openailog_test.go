package datasets

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

func testSalt(t testing.TB) anon.Salt {
	t.Helper()
	s, err := anon.ParseSalt("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// convertLog converts one log file with a mapping and reads the bucket back.
func convertLog(t *testing.T, path, mapping string) ([]trace.Request, *trace.Manifest, string) {
	t.Helper()
	return convertLogFormat(t, path, mapping, FormatOpenAILog)
}

// convertLogFormat is convertLog for a given format, accepting any rejects.
func convertLogFormat(t *testing.T, path, mapping, format string) ([]trace.Request, *trace.Manifest, string) {
	t.Helper()
	m, err := LoadMapping(mapping)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bucket")
	_, err = Convert(context.Background(), []string{path}, out, ConvertOptions{MaxRejectRatio: -1,
		Options: Options{Format: format, Log: LogOptions{Mapping: m, Salt: testSalt(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	rows, man, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	return rows, man, out
}

func TestOpenAILogPreset(t *testing.T) {
	rows, man, out := convertLog(t, "testdata/logs/openai.jsonl", "openai")
	if len(rows) != 4 || man.Rejects != 2 {
		t.Fatalf("%d rows, %d rejects; want 4 and 2", len(rows), man.Rejects)
	}
	r1, r2, r3 := rows[0], rows[1], rows[2]
	// Line 6: a stream that ended with a null finish reason was cut off by
	// the client: a cancel after 0.8 s.
	if r6 := rows[3]; r6.Cancelled == nil || *r6.CancelAfterMs != 800 {
		t.Errorf("line 6: cancelled %v after %v, want a cancel after 800 ms", r6.Cancelled, r6.CancelAfterMs)
	}
	if r1.Cancelled != nil {
		t.Error("a finished stream was taken for a cancel")
	}
	// Line 1: usage counts win over tokenizing; logged TTFT and E2E kept.
	if r1.InputTokens != 31 || r1.OutputTokens != 8 || r1.MaxTokens != 64 || !r1.Stream || r1.API != trace.APIChat {
		t.Errorf("line 1 shape %+v", r1.Shape)
	}
	if *r1.TTFTMs != 250 || *r1.E2EMs != 2000 || *r1.Status != 200 || *r1.FinishReason != "stop" || *r1.CachedTokens != 16 || *r1.Temperature != 0.2 {
		t.Errorf("line 1 outcome: ttft %v e2e %v status %v finish %v cached %v", *r1.TTFTMs, *r1.E2EMs, *r1.Status, *r1.FinishReason, *r1.CachedTokens)
	}
	if strings.Join(r1.Features, ",") != "json_schema,tools" {
		t.Errorf("features %v, want tools and json_schema", r1.Features)
	}
	if len(r1.PrefixBlocks) != 1 || r1.Tenant == "" || r1.Tenant == "acme-corp" || r1.RequestID == "req-1" {
		t.Errorf("line 1 identity %+v blocks %v", r1.Identity, r1.PrefixBlocks)
	}
	// Line 2 extends line 1's conversation and reply: the next turn, after
	// 28 s of think time (30 s arrival minus line 1's 2 s).
	if r2.SessionID != r1.SessionID || r1.Turn != 0 || r2.Turn != 1 || r2.ThinkTimeMs == nil || *r2.ThinkTimeMs != 28000 {
		t.Errorf("session: %q/%d and %q/%d, think %v", r1.SessionID, r1.Turn, r2.SessionID, r2.Turn, r2.ThinkTimeMs)
	}
	// Line 3: a client disconnect (499) replays as a cancel after 1.2 s; no
	// usage, so the prompt was counted by the tokenizer.
	if r3.Cancelled == nil || !*r3.Cancelled || r3.CancelAfterMs == nil || *r3.CancelAfterMs != 1200 || r3.API != trace.APICompletions || r3.InputTokens == 0 {
		t.Errorf("line 3: cancelled %v after %v, api %s, input %d", r3.Cancelled, r3.CancelAfterMs, r3.API, r3.InputTokens)
	}
	if r3.SessionID == r1.SessionID {
		t.Error("a different user's completion joined alice's session")
	}
	rej, err := os.ReadFile(filepath.Join(out, trace.RejectsName))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"line":4`, "malformed JSON", `"line":5`, "completion_tokens: negative"} {
		if !strings.Contains(string(rej), want) {
			t.Errorf("rejects lack %q:\n%s", want, rej)
		}
	}
	if man.PrefixIDs != trace.PrefixIDsSaltedHash || man.SaltFingerprint != testSalt(t).Fingerprint() || man.SaltRandom || man.Tokenizer == "" {
		t.Errorf("manifest: prefix %s fingerprint %s random %v tokenizer %q", man.PrefixIDs, man.SaltFingerprint, man.SaltRandom, man.Tokenizer)
	}
	if man.RejectReasons["malformed JSON: invalid JSON"] != 1 || man.RejectReasons["completion_tokens: negative"] != 1 {
		t.Errorf("reject reasons %v", man.RejectReasons)
	}
}

func TestLiteLLMPreset(t *testing.T) {
	rows, _, _ := convertLog(t, "testdata/logs/litellm.jsonl", "litellm")
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	ok, fail := rows[0], rows[1]
	if want := time.Date(2025, 3, 1, 10, 0, 0, 500e6, time.UTC).UnixMicro(); ok.TS != want {
		t.Errorf("ts %v, want %v", ok.Time(), time.UnixMicro(want).UTC())
	}
	if ok.InputTokens != 120 || ok.OutputTokens != 20 || ok.MaxTokens != 256 || *ok.TTFTMs != 400 || *ok.E2EMs != 1500 || *ok.Status != 200 || *ok.CachedTokens != 64 || ok.Model != "small" {
		t.Errorf("success row %+v ttft %v e2e %v", ok.Shape, *ok.TTFTMs, *ok.E2EMs)
	}
	if *fail.Status != 429 {
		t.Errorf("failure status %d, want the error code 429", *fail.Status)
	}
	if ok.Tenant == "" || ok.Tenant != fail.Tenant {
		t.Error("the team id did not become one tenant HMAC")
	}
}

func TestHeliconePreset(t *testing.T) {
	rows, _, _ := convertLog(t, "testdata/logs/helicone.jsonl", "helicone")
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	a, b := rows[0], rows[1]
	if *a.TTFTMs != 310 || *a.E2EMs != 800 || a.InputTokens != 12 || a.OutputTokens != 2 || *a.Status != 200 {
		t.Errorf("row 1: ttft %v e2e %v tokens %d/%d", *a.TTFTMs, *a.E2EMs, a.InputTokens, a.OutputTokens)
	}
	// A logged session id links the turns; think time from row 1's end.
	if a.SessionID != b.SessionID || b.Turn != 1 || *b.ThinkTimeMs != 8200 {
		t.Errorf("session %q/%q turn %d think %v", a.SessionID, b.SessionID, b.Turn, b.ThinkTimeMs)
	}
}

// TestLogRejectRatioWritesNoTrace: past the reject ratio no trace is
// written, only the rejects, and the error names each reason's first line.
func TestLogRejectRatioWritesNoTrace(t *testing.T) {
	m, _ := LoadMapping("openai")
	out := filepath.Join(t.TempDir(), "bucket")
	_, err := Convert(context.Background(), []string{"testdata/logs/openai.jsonl"}, out, ConvertOptions{
		Options: Options{Format: FormatOpenAILog, Log: LogOptions{Mapping: m, Salt: testSalt(t)}}})
	if err == nil || !strings.Contains(err.Error(), "2 of 6 lines rejected") || !strings.Contains(err.Error(), "1 line: completion_tokens: negative; first at line 5") ||
		!strings.Contains(err.Error(), "1 line: malformed JSON: invalid JSON; first at line 4") {
		t.Fatalf("error %v", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 || ents[0].Name() != trace.RejectsName {
		t.Errorf("a failed conversion left %v in %s; want only %s", ents, out, trace.RejectsName)
	}
	if rs := rejectLines(t, out); len(rs) != 2 || rs[0].Line != 4 || rs[1].Line != 5 {
		t.Errorf("rejects %+v; want lines 4 and 5", rs)
	}
}

func TestMappingFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"ts: start\nbogus_field: x\n": "line 2: unknown field",
		"ts start\n":                  "line 1: want",
		"model: m\n":                  "no path for ts",
	}
	for text, want := range cases {
		p := filepath.Join(dir, "m.yaml")
		os.WriteFile(p, []byte(text), 0o644)
		if _, err := LoadMapping(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
	if _, err := LoadMapping("no-such-preset"); err == nil || !strings.Contains(err.Error(), "litellm") {
		t.Errorf("unknown preset: %v", err)
	}
}

func TestConvertAnonymisationOptions(t *testing.T) {
	m, _ := LoadMapping("openai")
	convert := func(o ConvertOptions) []trace.Request {
		t.Helper()
		o.Format, o.Log = FormatOpenAILog, LogOptions{Mapping: m, Salt: testSalt(t)}
		o.MaxRejectRatio = -1
		out := filepath.Join(t.TempDir(), "b")
		if _, err := Convert(context.Background(), []string{"testdata/logs/openai.jsonl"}, out, o); err != nil {
			t.Fatal(err)
		}
		rows, _, err := trace.ReadAll(context.Background(), out)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// Dense ids: three different prompts, one block each: 0, 1, 2.
	rows := convert(ConvertOptions{DenseIDs: true})
	for i, r := range rows {
		if len(r.PrefixBlocks) != 1 || r.PrefixBlocks[0] != int64(i) {
			t.Errorf("row %d dense blocks %v, want [%d]", i, r.PrefixBlocks, i)
		}
	}
	// Coarser times: every arrival a whole second; line 1 was 10:00:00.000.
	for _, r := range convert(ConvertOptions{TimeResolution: time.Second}) {
		if r.TS%1e6 != 0 {
			t.Errorf("ts %d not a whole second", r.TS)
		}
	}
	// acme-corp has 3 requests: kept with k = 3, folded with k = 4.
	if rows := convert(ConvertOptions{MinTenantRequests: 3}); rows[0].Tenant == SmallTenants {
		t.Error("a tenant with 3 requests was folded at k = 3")
	}
	for _, r := range convert(ConvertOptions{MinTenantRequests: 4}) {
		if r.Tenant != SmallTenants {
			t.Errorf("tenant %q not folded at k = 4", r.Tenant)
		}
	}
}

func TestCSVLogWithMappingFile(t *testing.T) {
	rows, man, out := convertLogFormat(t, "testdata/logs/gateway.csv", "testdata/logs/gateway.map", FormatCSV)
	if len(rows) != 3 || man.Rejects != 1 {
		t.Fatalf("%d rows, %d rejects; want 3 and 1", len(rows), man.Rejects)
	}
	a, b, c := rows[0], rows[1], rows[2]
	if a.InputTokens != 1200 || a.OutputTokens != 80 || *a.TTFTMs != 310.5 || *a.E2EMs != 2400 || *a.Status != 200 || a.Model != "llama-70b" {
		t.Errorf("row 1: %+v", a)
	}
	if want := time.Date(2025, 3, 1, 10, 0, 0, 125e6, time.UTC).UnixMicro(); a.TS != want {
		t.Errorf("row 1 ts %v", a.Time())
	}
	if b.OutputTokens != 0 || b.TTFTMs == nil || b.Cancelled != nil {
		t.Errorf("row 2 (empty out_tok cell): %+v", b)
	}
	if c.Cancelled == nil || !*c.Cancelled || *c.CancelAfterMs != 1500 || c.TTFTMs != nil {
		t.Errorf("row 3 (disconnect): cancelled %v after %v", c.Cancelled, c.CancelAfterMs)
	}
	if a.Tenant != c.Tenant || a.Tenant == b.Tenant || a.Tenant == "cust-a" {
		t.Error("tenants were not keyed consistently")
	}
	rej, _ := os.ReadFile(filepath.Join(out, trace.RejectsName))
	if !strings.Contains(string(rej), "prompt_tokens: negative") || !strings.Contains(string(rej), `"line":5`) {
		t.Errorf("rejects: %s", rej)
	}
}

// TestConvertWithoutSaltUsesOneRandomSalt: with no salt given, one random
// salt keys the whole conversion (its inputs link with each other) and the
// manifest says so with that salt's fingerprint.
func TestConvertWithoutSaltUsesOneRandomSalt(t *testing.T) {
	m, _ := LoadMapping("openai")
	out := filepath.Join(t.TempDir(), "b")
	man, err := Convert(context.Background(), []string{"testdata/logs/openai.jsonl", "testdata/logs/openai.jsonl"}, out,
		ConvertOptions{MaxRejectRatio: -1, Options: Options{Format: FormatOpenAILog, Log: LogOptions{Mapping: m}}})
	if err != nil {
		t.Fatal(err)
	}
	if !man.SaltRandom || len(man.Notes) == 0 || man.SaltFingerprint == "" {
		t.Fatalf("manifest: random %v, fingerprint %q, notes %v", man.SaltRandom, man.SaltFingerprint, man.Notes)
	}
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	tenants := map[string]int{}
	for _, r := range rows {
		tenants[r.Tenant]++
	}
	// acme-corp sent 3 requests per copy: one HMAC for all 6.
	found := false
	for _, n := range tenants {
		if n == 6 {
			found = true
		}
	}
	if !found {
		t.Errorf("tenant counts %v: the two inputs were keyed with different salts", tenants)
	}
}
