package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAzureLMMFitRegeneratesImagesPerRequest converts a trace in the Azure
// LMM inference trace 2025's documented shape (TIMESTAMP, NumImages,
// ContextTokens, GeneratedTokens), fits it, generates from the fit and
// validates: images per request within KS 0.05.
func TestAzureLMMFitRegeneratesImagesPerRequest(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 3))
	var b strings.Builder
	b.WriteString("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n")
	at := time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)
	for range 6000 {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(300*time.Millisecond)))
		images := 0
		switch u := rng.Float64(); {
		case u < 0.4:
		case u < 0.75:
			images = 1
		case u < 0.9:
			images = 2
		case u < 0.97:
			images = 3
		default:
			images = 6
		}
		fmt.Fprintf(&b, "%s,%d,%d,%d\n", at.Format("2006-01-02 15:04:05.000000"), images, 200+images*1200+rng.IntN(800), 20+rng.IntN(400))
	}
	csv := writeFile(t, dir, "lmm.csv", []byte(b.String()))
	trace, model, wl := filepath.Join(dir, "trace"), filepath.Join(dir, "m.json"), filepath.Join(dir, "wl")
	for _, step := range [][]string{
		{"convert", csv, "--out", trace},
		{"fit", trace, "--no-latent", "--out", model},
		{"generate", model, "--duration", "30m", "--seed", "2", "--out", wl},
	} {
		if code, _, errOut := runCLI(t, step...); code != 0 {
			t.Fatalf("%v: %s", step, errOut)
		}
	}
	code, out, errOut := runCLI(t, "validate", trace, wl, "--json")
	if code != 0 && code != 1 {
		t.Fatalf("validate: %s", errOut)
	}
	var v struct {
		Checks []struct {
			Name      string  `json:"name"`
			Diff      float64 `json:"diff"`
			Threshold float64 `json:"threshold"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range v.Checks {
		if c.Name == "ks_images_per_request" {
			found = true
			t.Logf("images per request KS %.4f", c.Diff)
			if c.Diff > 0.05 {
				t.Errorf("images per request KS %.4f, want ≤ 0.05", c.Diff)
			}
		}
	}
	if !found {
		t.Fatalf("validate has no ks_images_per_request check:\n%s", out)
	}
}
