package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// oldOptionsBlock is run.json's "options" as replay wrote it before
// RecordedOptions (at c0499df): Options' Go field names, durations in
// nanoseconds.
const oldOptionsBlock = `{"Target":"http://127.0.0.1:8000","Model":"","ModelMap":{"a":"b"},"API":"","Stream":"","Speed":1,"Rate":20,"Arrival":"gamma","Burstiness":0.5,"Seed":7,"Concurrency":0,"MaxConcurrency":0,"From":"10m","To":"20m","LeadIn":60000000000,"Duration":0,"MaxRequests":0,"WarmupDuration":30000000000,"WarmupRequests":0,"ConnectTimeout":10000000000,"FirstTokenTimeout":0,"Timeout":600000000000,"Grace":10000000000,"MaxLateness":5000000,"IgnoreEOS":false,"ForceOutputLen":false,"HTTP":"","CACert":"","Insecure":false,"Tokenizer":"cl100k_base","TokenizerPattern":"","RunID":"","Shard":0,"ShardCount":0,"StartAt":"2027-01-02T03:04:05Z","RotateRows":10000,"RotateEvery":10000000000,"WaitReady":0,"MetricsURL":"http://127.0.0.1:8000/metrics","MetricsInterval":5000000000,"WaitIdle":5000000000,"ServeMetrics":"","Labels":{"config":"A"}}`

// TestReadsOldRunJSONOptions: an options block of either shape reads to
// the same RecordedOptions, and the new shape is snake case with
// durations as strings.
func TestReadsOldRunJSONOptions(t *testing.T) {
	// A whole old run.json still reads, its options too.
	dir := t.TempDir()
	runJSON := `{"schema_version":1,"run_id":"old","complete":true,"options":` + oldOptionsBlock + `,"outcomes":{"ok":3}}`
	if err := os.WriteFile(filepath.Join(dir, trace.RunInfoName), []byte(runJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	ri, err := trace.ReadRunInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ri.Options)
	old, err := ParseRecordedOptions(raw)
	if err != nil {
		t.Fatal(err)
	}
	if old.Rate != 20 || old.Arrival != ArrivalGamma || old.Burstiness != 0.5 || old.Seed != 7 || old.From != "10m" ||
		time.Duration(old.LeadIn) != time.Minute || time.Duration(old.WarmupDuration) != 30*time.Second ||
		time.Duration(old.ConnectTimeout) != 10*time.Second || time.Duration(old.Timeout) != 10*time.Minute ||
		time.Duration(old.MaxLateness) != 5*time.Millisecond || time.Duration(old.WaitIdle) != 5*time.Second ||
		old.StartAt != "2027-01-02T03:04:05Z" || old.Labels["config"] != "A" || old.ModelMap["a"] != "b" ||
		old.Tokenizer != "cl100k_base" || old.RotateRows != 10000 || old.MetricsURL != "http://127.0.0.1:8000/metrics" {
		t.Errorf("old block read as %+v", old)
	}
	// Written anew, it is snake case with durations as strings, and reads back the same.
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"connect_timeout":"10s"`, `"lead_in":"1m0s"`, `"max_lateness":"5ms"`, `"duration":"0s"`, `"arrival":"gamma"`, `"rotate_rows":10000`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("new options block lacks %s: %s", want, b)
		}
	}
	again, err := ParseRecordedOptions(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, old) {
		t.Errorf("round trip:\n%+v\n%+v", again, old)
	}
	// What a replay records: URLs redacted, header names but no values.
	o := DefaultOptions()
	o.Target, o.Headers, o.APIKey = "http://u:pw@h:1/?key=k", map[string]string{"X-B": "secret", "X-A": "secret"}, "sk-x"
	rec, _ := json.Marshal(o.Recorded())
	if s := string(rec); strings.Contains(s, "secret") || strings.Contains(s, "pw") || strings.Contains(s, "sk-x") || !strings.Contains(s, `"header_names":["X-A","X-B"]`) {
		t.Errorf("recorded options %s", s)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil {
		t.Error("a duration of \"soon\" was read")
	}
}
