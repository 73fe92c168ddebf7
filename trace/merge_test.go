package trace

import (
	"os"
	"path/filepath"
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
