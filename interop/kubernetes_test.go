package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/servetrace/servetrace/replay"
)

const manifests = "../deploy/kubernetes"

// strictDecode turns one YAML document into out, failing on any field the
// API type does not have (a typo such as "completionsMode" or "envFrm").
func strictDecode(doc []byte, out any) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

// TestKubernetesManifestsDecodeStrictly decodes every manifest into its
// Kubernetes API type and checks what the distributed replay relies on.
func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(manifests, "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("manifests: %v (%d files)", err, len(files))
	}
	jobs := map[string]*batchv1.Job{}
	var cm *corev1.ConfigMap
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct{ Kind, APIVersion string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + "/" + meta.Kind {
			case "batch/v1/Job":
				j := &batchv1.Job{}
				obj, jobs[filepath.Base(f)] = j, j
			case "v1/ConfigMap":
				cm = &corev1.ConfigMap{}
				obj = cm
			case "v1/PersistentVolumeClaim":
				obj = &corev1.PersistentVolumeClaim{}
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
			if err := strictDecode(doc, obj); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i, meta.Kind, err)
			}
		}
	}
	replayJob := jobs["replay-job.yaml"]
	if replayJob == nil || cm == nil || jobs["analyze-job.yaml"] == nil {
		t.Fatalf("missing the replay Job, the analyze Job or the ConfigMap")
	}
	spec := replayJob.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		t.Error("the replay Job is not Indexed: pods would not know their shard")
	}
	if spec.Completions == nil || spec.Parallelism == nil || *spec.Completions != *spec.Parallelism {
		t.Error("completions and parallelism differ: some shards would start late")
	}
	if fmt.Sprint(*spec.Completions) != cm.Data["SHARDS"] {
		t.Errorf("the Job runs %d shards, the ConfigMap says SHARDS=%s", *spec.Completions, cm.Data["SHARDS"])
	}
	if spec.BackoffLimit == nil || *spec.BackoffLimit != 0 {
		t.Error("a retried shard would resend its requests: backoffLimit must be 0")
	}
	c := spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--shard \"${JOB_COMPLETION_INDEX}/${SHARDS}\"", "--run-id", "--start-at", "--serve-metrics 0.0.0.0:9464", "--api-key-env"} {
		if !strings.Contains(args, want) {
			t.Errorf("the replay command lacks %s", want)
		}
	}
	for _, key := range []string{"TARGET", "WORKLOAD", "RUN_ID", "START_AT"} {
		if cm.Data[key] == "" {
			t.Errorf("the ConfigMap has no %s", key)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("the replay container requests no CPU or memory")
	}
	// A misspelt field must fail: the check above would catch it.
	if err := strictDecode([]byte("apiVersion: batch/v1\nkind: Job\nspec:\n  completionsMode: Indexed\n"), &batchv1.Job{}); err == nil {
		t.Error("strict decoding accepted an unknown field")
	}
}

// TestGrafanaDashboardQueriesServedMetrics checks that every query in the
// dashboard names a metric family the replayer's --serve-metrics serves.
func TestGrafanaDashboardQueriesServedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(manifests, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`servetrace_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, name := range re.FindAllString(tg.Expr, -1) {
				family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if !slices.Contains(replay.SelfMetricNames, family) {
					t.Errorf("panel %q queries %s, which --serve-metrics does not serve", p.Title, name)
				}
			}
		}
	}
	if queries < 6 {
		t.Errorf("%d queries in the dashboard", queries)
	}
}
