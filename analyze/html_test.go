package analyze

import (
	"bytes"
	"context"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium returns the headless browser, skipping the test where it is not
// installed unless SERVETRACE_REQUIRE_CHROMIUM is set (CI sets it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SERVETRACE_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed; .ci/run installs it")
	return ""
}

// TestHTMLReportRendersInChromium writes a report with every figure kind
// and opens it in headless Chromium: the rendered DOM must hold the
// expected number of non-empty SVG plots, and the screenshot must not be
// blank.
func TestHTMLReportRendersInChromium(t *testing.T) {
	browser := chromium(t)
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	writeSyntheticRun(t, run, 5000)
	rep, err := Analyze([]string{run}, Options{Bootstrap: BootstrapOptions{Resamples: 200, Seed: 1}, Curves: true, By: []string{"tenant"},
		SLO: SLO{TTFT: 400 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	figs, err := Figures(rep)
	if err != nil {
		t.Fatal(err)
	}
	// 3 CDFs (TTFT, ITL, E2E), the ITL histogram, 3 time series plots, 1 breakdown.
	const want = 8
	if len(figs) != want {
		t.Fatalf("%d figures, want %d", len(figs), want)
	}
	page := filepath.Join(dir, "report.html")
	var buf bytes.Buffer
	if err := WriteHTML(&buf, rep, figs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if ext := regexp.MustCompile(`(?i)(src=|<link|url\(|@import|href="http)`).FindString(buf.String()); ext != "" {
		t.Errorf("the page loads something from outside itself (%s)", ext)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + filepath.Join(dir, "profile")}
	dom, err := exec.CommandContext(ctx, browser, append(args, "--dump-dom", "file://"+page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	svgs := regexp.MustCompile(`(?s)<svg\b.*?</svg>`).FindAllString(string(dom), -1)
	nonEmpty := 0
	for _, s := range svgs {
		if strings.Count(s, "<path") >= 5 { // axes, ticks and data
			nonEmpty++
		}
	}
	if nonEmpty != want {
		t.Errorf("chromium's DOM holds %d non-empty SVG plots of %d, want %d", nonEmpty, len(svgs), want)
	}
	shot := filepath.Join(dir, "report.png")
	if out, err := exec.CommandContext(ctx, browser, append(args, "--window-size=1200,3000", "--screenshot="+shot, "file://"+page)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	inked, colours := 0, map[color.RGBA]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				inked++
			}
			if len(colours) < 1000 {
				colours[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 255}] = true
			}
		}
	}
	share := float64(inked) / float64(b.Dx()/2*b.Dy()/2)
	if share < 0.02 || len(colours) < 20 {
		t.Errorf("screenshot looks blank: %.1f%% inked pixels, %d colours", 100*share, len(colours))
	}
	if dst := os.Getenv("SERVETRACE_SCREENSHOT"); dst != "" {
		data, _ := os.ReadFile(shot)
		os.WriteFile(dst, data, 0o644)
	}
	t.Logf("%d plots rendered; screenshot %dx%d, %.1f%% inked, %d+ colours", nonEmpty, b.Dx(), b.Dy(), 100*share, len(colours))
}
