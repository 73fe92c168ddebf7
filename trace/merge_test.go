package trace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// TestLongMergeShardsRefusesAPlantedShardCount plants shard manifests whose
// names claim absurd shard counts: the merge must refuse each by name
// within a small memory cap, rather than list billions of missing shards.
func TestLongMergeShardsRefusesAPlantedShardCount(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		for _, name := range []string{
			"_manifest.shard-0-of-999999999999.json",
			"_manifest.shard-0-of-99999999999999999999999.json", // past int64
			"_manifest.shard-0-of-4097.json",
			"_manifest.shard-0-of-0.json",
			"_manifest.shard-3-of-2.json",
		} {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"kind":"trace"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := MergeShards(dir)
			if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "0 <= I < N <= 4096") {
				t.Errorf("%s: %v; want a refusal naming the file and the bound", name, err)
			}
		}
	})
}

// TestMergeShardsKeepsTheManifestBounds: shards whose parts or notes
// together pass what a manifest may list are refused, and no merged
// manifest is written that no reader would open.
func TestMergeShardsKeepsTheManifestBounds(t *testing.T) {
	for _, c := range []struct {
		name, field, elem, want string
		n                       int
	}{
		{"parts", "parts", "{}", "more than the 1048576 a manifest may list", MaxParts/2 + 1},
		{"notes", "notes", `"shard # note"`, "more than the 65536 a manifest may list", MaxManifestNotes},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range 2 {
				var b strings.Builder
				b.WriteString(`{"schema_version":1,"kind":"trace","sources":[{"name":"s"}],"` + c.field + `":[`)
				for k := range c.n {
					if k > 0 {
						b.WriteByte(',')
					}
					b.WriteString(strings.ReplaceAll(c.elem, "#", strconv.Itoa(i*c.n+k)))
				}
				b.WriteString("]}")
				if err := os.WriteFile(filepath.Join(dir, shardManifestName(strconv.Itoa(i)+"-of-2")), []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := MergeShards(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("MergeShards = %v; want a refusal saying %q", err, c.want)
			}
			if _, serr := os.Stat(filepath.Join(dir, ManifestName)); serr == nil {
				t.Errorf("a merged manifest past the bounds was written")
			}
		})
	}
}
