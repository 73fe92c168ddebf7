package datasets

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// rejectLines reads a bucket's (or a failed conversion's) rejects file.
func rejectLines(t *testing.T, dir string) []trace.Reject {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, trace.RejectsName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trace.Reject
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r trace.Reject
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("rejects file line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func rejectLineNumbers(rs []trace.Reject) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.Line)
	}
	return out
}

// TestLiteLLMPrettyPrintedDocuments: LiteLLM StandardLoggingPayload records
// (the fields of LiteLLM's docs/my-website/docs/proxy/logging_spec.md, in
// BerriAI/litellm) stored as pretty-printed JSON, two documents one
// after the other (indented differently) and a JSON array of four, are
// detected as request logs and converted; a reject names the line its
// document starts on. model_group "" and null fall through to model.
func TestLiteLLMPrettyPrintedDocuments(t *testing.T) {
	type row struct {
		ts             time.Time
		model          string
		in, out, maxTk int64
		status         int32
	}
	at := func(sec float64) time.Time { return time.Unix(0, int64(sec*1e9)).UTC() }
	for _, c := range []struct {
		file        string
		rows        []row
		rejectLines []int64
	}{
		{"testdata/logs/litellm_pretty.json", []row{
			{at(1740823200.0), "gpt-4o-mini", 30, 4, 128, 200}, // model_group ""
			{at(1740823201.5), "small", 41, 6, 128, 200},
		}, nil},
		{"testdata/logs/litellm_array.json", []row{
			{at(1740823200.0), "gpt-4o-mini", 30, 4, 128, 200},
			{at(1740823202.0), "large", 50, 9, 128, 200},
			{at(1740823204.0), "gpt-4o-mini", 22, 3, 128, 429}, // model_group null, a failure
		}, []int64{114}}, // the element without startTime opens on line 114
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			f, err := os.Open(c.file)
			if err != nil {
				t.Fatal(err)
			}
			head, _ := bufio.NewReaderSize(f, 1<<20).Peek(1 << 20)
			f.Close()
			if got, err := detect(head, true, c.file); got != FormatOpenAILog {
				t.Errorf("detected %q, %v; want %s", got, err, FormatOpenAILog)
			}
			rows, man, out := convertLogFormat(t, c.file, "litellm", "")
			if len(rows) != len(c.rows) || man.Rejects != int64(len(c.rejectLines)) {
				t.Fatalf("%d rows, %d rejects; want %d and %d", len(rows), man.Rejects, len(c.rows), len(c.rejectLines))
			}
			for i, w := range c.rows {
				r := rows[i]
				if !r.Time().Equal(w.ts) || r.Model != w.model || r.InputTokens != w.in || r.OutputTokens != w.out || r.MaxTokens != w.maxTk || *r.Status != w.status {
					t.Errorf("row %d: %v %q %d/%d max %d status %d; want %+v", i, r.Time(), r.Model, r.InputTokens, r.OutputTokens, r.MaxTokens, *r.Status, w)
				}
			}
			if len(c.rejectLines) > 0 {
				rs := rejectLines(t, out)
				if !slices.Equal(rejectLineNumbers(rs), c.rejectLines) || !strings.Contains(rs[0].Reason, "ts: no timestamp at startTime") {
					t.Errorf("rejects %+v; want lines %v, no timestamp", rs, c.rejectLines)
				}
			}
		})
	}
}

// TestJSONDocsSplitsRecords cuts documents at their closing brace, wherever
// lines break, and numbers each by the line it starts on.
func TestJSONDocsSplitsRecords(t *testing.T) {
	for _, c := range []struct {
		in    string
		recs  []string
		lines []int64
		errs  []error
	}{
		{"{\"a\":1}\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}, []int64{1, 2}, []error{nil, nil}},
		{"{\n  \"a\": \"}{\",\n  \"b\": [1,\n 2]\n}{\"c\":\"\\\"}\"}\n\n{\"d\":\n3}", []string{"{\n  \"a\": \"}{\",\n  \"b\": [1,\n 2]\n}", `{"c":"\"}"}`, "{\"d\":\n3}"}, []int64{1, 5, 7}, []error{nil, nil, nil}},
		{"[\n {\"a\":1},\n {\"b\":\n 2}\n]\n", []string{`{"a":1}`, "{\"b\":\n 2}"}, []int64{2, 3}, []error{nil, nil}},
		{"junk here\n{\"a\":1}", []string{"junk here", `{"a":1}`}, []int64{1, 2}, []error{nil, nil}},
		{"{\"a\":1}\n{\"b\":", []string{`{"a":1}`, `{"b":`}, []int64{1, 2}, []error{nil, errDocCutShort}},
	} {
		d := newJSONDocs(bufio.NewReader(strings.NewReader(c.in)))
		var recs []string
		var lines []int64
		var errs []error
		for {
			rec, line, err := d.next()
			if err != nil && !recordError(err) {
				break
			}
			recs, lines, errs = append(recs, string(rec)), append(lines, line), append(errs, err)
		}
		if !slices.Equal(recs, c.recs) || !slices.Equal(lines, c.lines) || !slices.Equal(errs, c.errs) {
			t.Errorf("%q: records %q at lines %v (%v); want %q at %v (%v)", c.in, recs, lines, errs, c.recs, c.lines, c.errs)
		}
	}
}

// TestEmptyStringIsAbsent: in every mapping path a null or an empty string
// falls through to the next path, as if the key were missing.
func TestEmptyStringIsAbsent(t *testing.T) {
	m, err := LoadMapping("litellm")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		rec  map[string]any
		want any // nil: absent
	}{
		{"group wins", map[string]any{"model_group": "small", "model": "gpt-4o-mini"}, "small"},
		{"empty group", map[string]any{"model_group": "", "model": "gpt-4o-mini"}, "gpt-4o-mini"},
		{"null group", map[string]any{"model_group": nil, "model": "gpt-4o-mini"}, "gpt-4o-mini"},
		{"both empty", map[string]any{"model_group": "", "model": ""}, nil},
		{"space is a value", map[string]any{"model_group": " ", "model": "gpt-4o-mini"}, " "},
	} {
		got, ok := m.lookup(c.rec, "model")
		if ok != (c.want != nil) || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, ok, c.want)
		}
	}
	// Through a whole conversion: an empty end_user falls through to the
	// user id, so the two rows are one tenant only where that id is.
	rows, _, _ := convertLogFormat(t, "testdata/logs/litellm_pretty.json", "litellm", "")
	if rows[0].Model != "gpt-4o-mini" {
		t.Errorf("model %q, want gpt-4o-mini (model_group was \"\")", rows[0].Model)
	}
}

// TestJSONStringBodies: gateways that log the request or response body as
// the JSON text of it (a string) read like those that log the object; a
// body string that does not parse rejects its line, naming the field. The
// shapes are this repository's openai preset and Helicone's HeliconeRequest
// export (request_body, response_body), with the bodies stringified.
func TestJSONStringBodies(t *testing.T) {
	for _, c := range []struct {
		file, mapping string
		in, out, max  []int64
		rejects       []int64
		reason        string
	}{
		{"testdata/logs/gateway_strings.jsonl", "openai", []int64{14, 14, 15}, []int64{8, 8, 9}, []int64{64, 64, 32}, []int64{4}, "request: a string holding JSON that does not parse"},
		{"testdata/logs/helicone_strings.jsonl", "helicone", []int64{12}, []int64{2}, []int64{16}, nil, ""},
	} {
		t.Run(c.mapping, func(t *testing.T) {
			rows, man, out := convertLogFormat(t, c.file, c.mapping, "")
			if len(rows) != len(c.in) || man.Rejects != int64(len(c.rejects)) {
				t.Fatalf("%d rows, %d rejects; want %d, %d", len(rows), man.Rejects, len(c.in), len(c.rejects))
			}
			for i, r := range rows {
				if r.InputTokens != c.in[i] || r.OutputTokens != c.out[i] || r.MaxTokens != c.max[i] || r.API != trace.APIChat || len(r.PrefixBlocks) == 0 || *r.FinishReason != "stop" {
					t.Errorf("row %d: %+v, finish %v", i, r.Shape, r.FinishReason)
				}
			}
			if len(c.rejects) > 0 {
				rs := rejectLines(t, out)
				if !slices.Equal(rejectLineNumbers(rs), c.rejects) || !strings.Contains(rs[0].Reason, c.reason) {
					t.Errorf("rejects %+v; want lines %v: %s", rs, c.rejects, c.reason)
				}
			}
		})
	}
}

// convertWith converts inputs with the given options (a test salt added)
// and reads the bucket back.
func convertWith(t *testing.T, inputs []string, o ConvertOptions) ([]trace.Request, *trace.Manifest, string) {
	t.Helper()
	o.Log.Salt = testSalt(t)
	out := filepath.Join(t.TempDir(), "bucket")
	if _, err := Convert(context.Background(), inputs, out, o); err != nil {
		t.Fatal(err)
	}
	rows, man, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	return rows, man, out
}

// TestGatewayBodiesAsStrings (issue 46, 15): logs that keep the request
// and response bodies as their JSON text convert, their token counts read
// from the body's usage, with no --format or --map: Helicone's ClickHouse
// table (request_response_rmt, whose request_body and response_body are
// String columns and prompt_tokens Nullable: clickhouse/migrations in
// Helicone/helicone), printed by ClickHouse's JSONEachRow (64-bit integers
// quoted); a gateway's request_body and response_body strings; Portkey's
// log shape (request.body and response.body strings, as its logs API
// takes them); and a body encoded twice. Before, the gateway file was
// refused for want of token counts and the Helicone rows counted their
// messages instead of reading the logged usage.
func TestGatewayBodiesAsStrings(t *testing.T) {
	for _, c := range []struct {
		file                 string
		in, out, max, cached []int64
		e2e                  []float64
	}{
		{"testdata/logs/helicone_clickhouse.jsonl", []int64{37, 52}, []int64{9, 11}, []int64{32, 48}, []int64{-1, 32}, []float64{640, 910}},
		{"testdata/logs/gateway_bodies.jsonl", []int64{14, 21, 33}, []int64{8, 6, 7}, []int64{64, 96, 128}, []int64{-1, -1, -1}, nil},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			rows, man, _ := convertWith(t, []string{c.file}, ConvertOptions{})
			if len(rows) != len(c.in) || man.Rejects != 0 {
				t.Fatalf("%d rows, %d rejects; want %d rows", len(rows), man.Rejects, len(c.in))
			}
			for i, r := range rows {
				cached := int64(-1)
				if r.CachedTokens != nil {
					cached = *r.CachedTokens
				}
				if r.InputTokens != c.in[i] || r.OutputTokens != c.out[i] || r.MaxTokens != c.max[i] || cached != c.cached[i] ||
					r.API != trace.APIChat || len(r.PrefixBlocks) == 0 || r.FinishReason == nil || *r.FinishReason != "stop" {
					t.Errorf("row %d: %+v cached %d finish %v; want input %d, output %d, max %d, cached %d, chat, prefix blocks, stop",
						i, r.Shape, cached, r.FinishReason, c.in[i], c.out[i], c.max[i], c.cached[i])
				}
				if c.e2e != nil && (r.E2EMs == nil || *r.E2EMs != c.e2e[i] || r.Tenant == "" || r.Model != "gpt-4o-mini") {
					t.Errorf("row %d: e2e %v tenant %q model %q; want %v ms, the user's tenant, gpt-4o-mini", i, r.E2EMs, r.Tenant, r.Model, c.e2e[i])
				}
			}
		})
	}
}
