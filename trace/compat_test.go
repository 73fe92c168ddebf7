package trace

import (
	"context"
	"path/filepath"
	"testing"
)

// requestV1 is the request record as schema version 1 wrote it: no media,
// tool, structured-output or extra sampling columns.
type requestV1 struct {
	Identity
	TS int64 `parquet:"ts,timestamp(microsecond),delta"`
	Shape
	Temperature *float64 `parquet:"temperature,optional"`
	TopP        *float64 `parquet:"top_p,optional"`
	Phase       string   `parquet:"phase,dict"`
}

// resultV1 is a result part as schema version 1 wrote it (the columns any
// reader needs; a v1 part had no features_* or choice_index columns).
type resultV1 struct {
	Identity
	Shape
	ScheduledNs  int64   `parquet:"scheduled_ns"`
	AdmittedNs   int64   `parquet:"admitted_ns"`
	SentNs       *int64  `parquet:"sent_ns,optional"`
	TokenTimesNs []int64 `parquet:"token_times_ns,list"`
	Outcome      string  `parquet:"outcome,dict"`
	RunID        string  `parquet:"run_id,dict"`
}

// TestSchemaV1BucketStillReads reads a bucket written with version 1's
// columns: every old column keeps its value and every new one reads as
// absent (zero, empty or nil), never as an error.
func TestSchemaV1BucketStillReads(t *testing.T) {
	dir := t.TempDir()
	ts := int64(1_700_000_000_000_000)
	rows := []requestV1{
		{Identity: Identity{RequestID: "a", Model: "m", Adapter: "lora-1"}, TS: ts,
			Shape:       Shape{InputTokens: 100, OutputTokens: 20, MaxTokens: 20, API: APIChat, N: 1, Features: []string{FeatureImage, FeatureTools}},
			Temperature: Ptr(0.5)},
		{Identity: Identity{RequestID: "b", Model: "m"}, TS: ts + 1000,
			Shape: Shape{InputTokens: 7, OutputTokens: 3, MaxTokens: 3, API: APICompletions, N: 1}},
	}
	part := "date=2023-11-14/hour=22/part-v1-00000.parquet"
	if err := writePartFile(filepath.Join(dir, part), rows, 0); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{SchemaVersion: 1, ToolVersion: "0.1.0", Kind: "trace", Rows: 2,
		Parts: []Part{{Path: part, Rows: 2, MinTS: ts, MaxTS: ts + 1000}}}
	if err := WriteJSONAtomic(filepath.Join(dir, ManifestName), m); err != nil {
		t.Fatal(err)
	}
	got, man, err := ReadAll(context.Background(), dir)
	if err != nil {
		t.Fatalf("a version-1 bucket must read: %v", err)
	}
	if man.SchemaVersion != 1 || len(got) != 2 {
		t.Fatalf("read schema %d, %d rows; want 1 and 2", man.SchemaVersion, len(got))
	}
	a := got[0]
	if a.RequestID != "a" || a.Adapter != "lora-1" || a.InputTokens != 100 || a.Temperature == nil || *a.Temperature != 0.5 ||
		len(a.Features) != 2 || a.Features[0] != FeatureImage {
		t.Errorf("old columns changed on read: %+v", a)
	}
	if a.ImageCount != 0 || len(a.ImageWidthsPx) != 0 || len(a.ImageIDs) != 0 || a.ToolCount != 0 || a.OutputFormat != "" || a.Seed != nil || a.TopK != nil || a.ImageTokens != nil {
		t.Errorf("new columns must read as absent from a version-1 part: %+v %+v seed=%v", a.Media, a.Calls, a.Seed)
	}
}

func TestSchemaV1ResultsStillRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "part-00000.parquet")
	rows := []resultV1{{Identity: Identity{RequestID: "a"}, Shape: Shape{InputTokens: 5, API: APIChat}, ScheduledNs: 10, AdmittedNs: 10,
		SentNs: Ptr(int64(11)), TokenTimesNs: []int64{0, 5}, Outcome: OutcomeOK, RunID: "r"}}
	if err := writePartFile(path, rows, 0); err != nil {
		t.Fatal(err)
	}
	got, err := readPartFile[Result](path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Outcome != OutcomeOK || len(got[0].TokenTimesNs) != 2 || len(got[0].FeaturesSent) != 0 || len(got[0].ChoiceIndex) != 0 {
		t.Fatalf("a version-1 result part read as %+v", got)
	}
	if err := got[0].Validate(); err != nil {
		t.Errorf("a version-1 result row must validate: %v", err)
	}
}

func TestContractValidate(t *testing.T) {
	base := func() Request {
		return Request{Identity: Identity{RequestID: "x"}, TS: 1_700_000_000_000_000, Shape: Shape{InputTokens: 10, API: APIChat, N: 1}}
	}
	cases := []struct {
		name  string
		edit  func(*Request)
		field string // "" = valid
	}{
		{"plain", func(*Request) {}, ""},
		{"two images with sizes", func(r *Request) {
			r.ImageCount, r.ImageWidthsPx, r.ImageHeightsPx, r.ImageIDs = 2, []int32{640, 0}, []int32{480, 0}, []int64{1, 2}
		}, ""},
		{"sizes for one image of two", func(r *Request) { r.ImageCount, r.ImageWidthsPx = 2, []int32{640} }, "image_widths_px"},
		{"negative height", func(r *Request) { r.ImageCount, r.ImageHeightsPx = 1, []int32{-1} }, "image_heights_px"},
		{"huge width", func(r *Request) { r.ImageCount, r.ImageWidthsPx = 1, []int32{MaxImageSidePx + 1} }, "image_widths_px"},
		{"audio ids short", func(r *Request) { r.AudioCount, r.AudioIDs = 2, []int64{1} }, "audio_ids"},
		{"audio too long", func(r *Request) { r.AudioCount, r.AudioMs = 1, []int64{MaxAudioMs + 1} }, "audio_ms"},
		{"negative tools", func(r *Request) { r.ToolCount = -1 }, "tool_count"},
		{"schema tokens over", func(r *Request) { r.SchemaTokens = MaxTokens + 1 }, "schema_tokens"},
		{"unknown format", func(r *Request) { r.OutputFormat = "xml" }, "output_format"},
		{"top_k -1 means none", func(r *Request) { r.TopK = Ptr(int32(-1)) }, ""},
		{"top_k -2", func(r *Request) { r.TopK = Ptr(int32(-2)) }, "top_k"},
		{"penalty 2", func(r *Request) { r.PresencePenalty = Ptr(2.0) }, ""},
		{"penalty 2.5", func(r *Request) { r.FrequencyPenalty = Ptr(2.5) }, "frequency_penalty"},
		{"image tokens negative", func(r *Request) { r.ImageTokens = Ptr(int64(-3)) }, "image_tokens"},
		{"control char in effort", func(r *Request) { r.ReasoningEffort = "hi\x1b" }, "reasoning_effort"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base()
			c.edit(&r)
			err := r.Validate()
			switch fe, _ := err.(*FieldError); {
			case c.field == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case c.field != "" && (fe == nil || fe.Field != c.field):
				t.Fatalf("want a fault in %s, got %v", c.field, err)
			}
		})
	}
}
