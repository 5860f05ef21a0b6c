package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/browsertest"
)

// The browser sees the console of a page whose script fails: the check
// below is not blind.
func TestBrowserSeesScriptErrors(t *testing.T) {
	bin := browsertest.Chromium(t)
	page := filepath.Join(t.TempDir(), "broken.html")
	if err := os.WriteFile(page, []byte("<!doctype html><body><script>undefinedFunction()</script></body>"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, log := browsertest.Headless(t, bin, "file://"+page, "--dump-dom")
	if m := strings.Join(browsertest.Console(log), "\n"); !strings.Contains(m, "undefinedFunction") {
		t.Errorf("the console error is not in Chromium's log:\n%s", log)
	}
}

// The HTML report of the example log, loaded in headless Chromium: its
// script ran without an error and counted the charts' data points, every
// ratio chart has a point per bucket, and the screenshot shows the
// charts' colours.
func TestReportInBrowser(t *testing.T) {
	bin := browsertest.Chromium(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.html")
	if code, _, errs := runArgs("", "replay", "--log", sampleLog, "--config", current, "--config", candidate, "--html", report); code != 0 {
		t.Fatalf("replay --html = %d: %s", code, errs)
	}
	dom, log := browsertest.Headless(t, bin, "file://"+report, "--dump-dom")
	if m := browsertest.Console(log); len(m) > 0 {
		t.Errorf("console messages (script errors):\n%s", strings.Join(m, "\n"))
	}
	rendered := regexp.MustCompile(`<body data-rendered="(\d+) charts, (\d+) points">`).FindStringSubmatch(dom)
	if rendered == nil {
		t.Fatalf("the report's script did not run to its end: no data-rendered on <body>:\n%.2000s", dom)
	}
	// 5 candidate cells (2 + 3 policies), 3 charts each.
	if charts, _ := strconv.Atoi(rendered[1]); charts != 15 {
		t.Errorf("%s charts rendered, want 15", rendered[1])
	}
	svgs := regexp.MustCompile(`(?s)<figure class="chart" data-chart="(\w+)">\s*<svg [^>]*data-points="(\d+)"[^>]*>(.*?)</svg>`).FindAllStringSubmatch(dom, -1)
	if len(svgs) != 15 {
		t.Fatalf("%d charts with counted points in the DOM, want 15", len(svgs))
	}
	total, areas := 0, 0
	for _, s := range svgs {
		n, _ := strconv.Atoi(s[2])
		total += n
		switch s[1] {
		case "ratio":
			values := regexp.MustCompile(`<polyline class="ratio" data-values="([^"]*)"`).FindStringSubmatch(s[3])
			if values == nil || n != len(strings.Fields(values[1])) || n < 20 {
				t.Errorf("ratio chart: %d points for %v buckets", n, values)
			}
		case "admitted":
			if n == 0 {
				t.Errorf("an admitted chart has no area")
			}
			areas += n
		}
	}
	if want, _ := strconv.Atoi(rendered[2]); total != want || areas == 0 {
		t.Errorf("points counted by the script %d, in the DOM %d (areas %d)", want, total, areas)
	}

	shot := filepath.Join(dir, "report.png")
	_, log = browsertest.Headless(t, bin, "file://"+report, "--window-size=1300,1600", "--screenshot="+shot)
	if m := browsertest.Console(log); len(m) > 0 {
		t.Errorf("console messages (script errors):\n%s", strings.Join(m, "\n"))
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
	// The first tenant's colour (#1976d2) and the ratio line's (#1565c0)
	// cover a part of the page: the charts were painted.
	if b := img.Bounds(); b.Dx() != 1300 || b.Dy() != 1600 {
		t.Errorf("screenshot %v, want 1300x1600", b)
	}
	area := colourShare(img, color.RGBA{0x19, 0x76, 0xd2, 0xff}, 60)
	line := colourShare(img, color.RGBA{0x15, 0x65, 0xc0, 0xff}, 20)
	t.Logf("screenshot: %.3f%% first tenant colour, %.3f%% ratio line colour", area*100, line*100)
	if area < 0.005 || line < 0.0002 {
		t.Errorf("screenshot: %.4f%% of the pixels in the first tenant's colour, %.4f%% in the ratio line's: the charts were not painted", area*100, line*100)
	}
}

// colourShare returns the share of img's pixels within tol of c on each
// channel (areas are drawn translucent over white, so their colour is
// lighter).
func colourShare(img image.Image, c color.RGBA, tol int) float64 {
	b := img.Bounds()
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(int(r>>8), int(c.R), tol) && near(int(g>>8), int(c.G), tol) && near(int(bl>>8), int(c.B), tol) {
				n++
			}
		}
	}
	return float64(n) / float64(b.Dx()*b.Dy())
}

func near(a, b, tol int) bool { return a-b <= tol && b-a <= tol }
