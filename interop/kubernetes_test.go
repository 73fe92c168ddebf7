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
// Kubernetes API type and checks what the distributed replay and the
// distributed fit rely on.
func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(manifests, "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("manifests: %v (%d files)", err, len(files))
	}
	// Jobs and ConfigMaps by name: a file may hold several documents.
	jobs := map[string]*batchv1.Job{}
	cms := map[string]*corev1.ConfigMap{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct {
				Kind, APIVersion string
				Metadata         struct{ Name string }
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + "/" + meta.Kind {
			case "batch/v1/Job":
				j := &batchv1.Job{}
				obj, jobs[meta.Metadata.Name] = j, j
			case "v1/ConfigMap":
				cm := &corev1.ConfigMap{}
				obj, cms[meta.Metadata.Name] = cm, cm
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
	replayJob, cm := jobs["servetrace-replay"], cms["servetrace-replay"]
	if replayJob == nil || cm == nil || jobs["servetrace-analyze"] == nil {
		t.Fatalf("missing the replay Job, the analyze Job or the replay ConfigMap")
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
	checkFitJobs(t, jobs, cms)
	// A misspelt field must fail: the check above would catch it.
	if err := strictDecode([]byte("apiVersion: batch/v1\nkind: Job\nspec:\n  completionsMode: Indexed\n"), &batchv1.Job{}); err == nil {
		t.Error("strict decoding accepted an unknown field")
	}
}

// checkFitJobs checks the distributed fit (fit-job.yaml): an Indexed Job of
// SHARDS pods, each fitting its shard into a partial named by its index on
// the shared volume, and a merge Job that merges exactly those partials.
func checkFitJobs(t *testing.T, jobs map[string]*batchv1.Job, cms map[string]*corev1.ConfigMap) {
	t.Helper()
	fit, merge, cm := jobs["servetrace-fit"], jobs["servetrace-fit-merge"], cms["servetrace-fit"]
	if fit == nil || merge == nil || cm == nil {
		t.Fatalf("missing the fit Job, the fit merge Job or the fit ConfigMap")
	}
	spec := fit.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		t.Error("the fit Job is not Indexed: pods would not know their shard")
	}
	if spec.Completions == nil || fmt.Sprint(*spec.Completions) != cm.Data["SHARDS"] {
		t.Errorf("the fit Job runs %v shards, its ConfigMap says SHARDS=%s", spec.Completions, cm.Data["SHARDS"])
	}
	for _, key := range []string{"TRACE", "SHARDS", "FIT_ID", "MERGE_WAIT_S"} {
		if cm.Data[key] == "" {
			t.Errorf("the fit ConfigMap has no %s", key)
		}
	}
	partial := `/data/fits/${FIT_ID}/part-${JOB_COMPLETION_INDEX}-of-${SHARDS}.fitpart.gz`
	glob := `"$dir"/part-*-of-"${SHARDS}".fitpart.gz`
	for _, c := range []struct {
		job  *batchv1.Job
		want []string
	}{
		{fit, []string{`servetrace fit "$TRACE"`, `--shard "${JOB_COMPLETION_INDEX}/${SHARDS}"`, `--out "` + partial + `"`}},
		{merge, []string{`dir="/data/fits/${FIT_ID}"`, "servetrace fit --merge", `--out "$dir/model.json"`, glob}},
	} {
		pod := c.job.Spec.Template.Spec
		ctr := pod.Containers[0]
		args := strings.Join(ctr.Args, " ")
		for _, w := range c.want {
			if !strings.Contains(args, w) {
				t.Errorf("the %s command lacks %s", c.job.Name, w)
			}
		}
		if len(ctr.EnvFrom) == 0 || ctr.EnvFrom[0].ConfigMapRef == nil || ctr.EnvFrom[0].ConfigMapRef.Name != cm.Name {
			t.Errorf("the %s container does not read the %s ConfigMap", c.job.Name, cm.Name)
		}
		if len(pod.Volumes) == 0 || pod.Volumes[0].PersistentVolumeClaim == nil || pod.Volumes[0].PersistentVolumeClaim.ClaimName != "servetrace-data" ||
			len(ctr.VolumeMounts) == 0 || ctr.VolumeMounts[0].MountPath != "/data" {
			t.Errorf("the %s pod does not mount the shared volume at /data", c.job.Name)
		}
		if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() {
			t.Errorf("the %s container requests no CPU or memory", c.job.Name)
		}
	}
	// The merge's glob, as the shell expands it, takes the names the shards
	// write.
	name := strings.NewReplacer("${FIT_ID}", "f", "${JOB_COMPLETION_INDEX}", "3", "${SHARDS}", "4").Replace(partial)
	pattern := strings.NewReplacer(`"`, "", "$dir", "/data/fits/f", "${SHARDS}", "4").Replace(glob)
	if ok, err := filepath.Match(pattern, name); !ok || err != nil {
		t.Errorf("the merge's glob %s does not match the shard's partial %s", pattern, name)
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
