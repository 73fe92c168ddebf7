package datasets

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestAzureLMM2025 reads a fixture in the documented shape of the Azure LMM
// inference trace 2025 (ModServe, SoCC 2025: TIMESTAMP, NumImages,
// ContextTokens, GeneratedTokens), detected as the Azure format by its
// header: image counts reach image_count and the image feature, sizes stay
// unknown, and a bad count rejects its line by name.
func TestAzureLMM2025(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "azure", "lmm_2025.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sink memSink
	st, err := Read(context.Background(), f, Options{Name: "lmm_2025.csv"}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != FormatAzure || len(sink.rows) != 5 || len(sink.rejects) != 1 {
		t.Fatalf("format %s, %d rows, %d rejects; want azure, 5, 1", st.Format, len(sink.rows), len(sink.rejects))
	}
	if r := sink.rejects[0]; r.Line != 6 || r.Reason != "NumImages is not a whole number" {
		t.Errorf("reject %+v, want line 6 naming NumImages", r)
	}
	var images []int32
	for _, r := range sink.rows {
		images = append(images, r.ImageCount)
		if (r.ImageCount > 0) != slices.Contains(r.Features, trace.FeatureImage) {
			t.Errorf("row with %d images has features %v", r.ImageCount, r.Features)
		}
		if len(r.ImageWidthsPx) != 0 || len(r.ImageIDs) != 0 {
			t.Errorf("the trace gives no sizes or identities, got %v %v", r.ImageWidthsPx, r.ImageIDs)
		}
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
	}
	if !slices.Equal(images, []int32{1, 0, 3, 2, 1}) {
		t.Errorf("image counts %v, want 1 0 3 2 1 (read off the CSV)", images)
	}
	if sink.rows[2].InputTokens != 4410 || sink.rows[2].OutputTokens != 120 {
		t.Errorf("row 3 %d/%d, want 4410/120", sink.rows[2].InputTokens, sink.rows[2].OutputTokens)
	}
}
