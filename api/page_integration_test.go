//go:build integration

package api

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const chromiumPath = "/usr/bin/chromium"

// chromium runs headless Chromium with extra arguments and the page URL,
// and returns its standard output.
func chromium(t *testing.T, profile string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + profile, "--window-size=1200,900"}
	cmd := exec.CommandContext(ctx, chromiumPath, append(base, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\nstderr:\n%s", args, err, errb.String())
	}
	return out.Bytes()
}

// TestStatusPageInChromium loads the status page in headless Chromium
// against a server over the fake job, checks what the page shows after its
// script ran, and keeps a screenshot.
func TestStatusPageInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed for this test (apt-get install -y --no-install-recommends chromium): %v", err)
	}
	f := newFakeJob(t)
	s, err := New(f, Options{Addr: "127.0.0.1:0", SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Three minutes of history: the lag climbs from 6 s to 90 s (a shard
	// stalls), then falls back to 6 s when it is marked idle.
	s.hist = newHistory(900) // drop the sample New took: history is chronological
	now := time.Now().UnixMilli()
	wm0 := f.st.WatermarkMs - 180_000
	for i := int64(0); i < 180; i++ {
		lag := int64(6_000)
		if i >= 40 && i < 130 {
			lag = 6_000 + (i-40)*1_000
		}
		at := now - (180-i)*1_000
		wm := wm0 + i*1_000 + 6_000 - lag
		s.hist.add(Sample{AtMs: at, WatermarkMs: &wm, LagMs: &lag})
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	out, err := os.MkdirTemp(os.TempDir(), "adclick-statuspage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot and DOM in %s", out)

	dom := string(chromium(t, filepath.Join(out, "profile-dom"), "--virtual-time-budget=5000", "--dump-dom", srv.URL+"/"))
	if err := os.WriteFile(filepath.Join(out, "dom.html"), []byte(dom), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`data-refreshes="`,          // a refresh completed
		`2026-11-29 10:15:00Z`,      // job watermark
		`6.2 s`,                     // watermark lag
		`job_gen 7 · parallelism 2`, // header
		`41 at 10:15:01`,            // last checkpoint
		`<td>S1</td>`, `<td>S2</td>`, `<td>S3</td>`,
		`idle (left out)`,
		`−46 s`,  // S3's watermark behind the job's (10:14:14.999 vs 10:15:00.999)
		`+1.0 s`, // S2 ahead
		`<td>ad_9</td>`, `<td>ad_7</td>`, `<td>ad_2</td>`,
		`id="lagchart" data-points="180"`,
		`id="wmchart" data-points="180"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("page after its script ran lacks %q", want)
		}
	}
	// Top ads in order: ad_9 (8 clicks), ad_7 (6), ad_2 (1).
	if m := regexp.MustCompile(`<td>(ad_\d)</td>.*?<td>(ad_\d)</td>.*?<td>(ad_\d)</td>`).FindStringSubmatch(dom[strings.Index(dom, `id="top"`):]); len(m) != 4 ||
		m[1] != "ad_9" || m[2] != "ad_7" || m[3] != "ad_2" {
		t.Errorf("top ads: got %v, want ad_9, ad_7, ad_2", m)
	}
	if strings.Contains(dom, `id="error" style="display: block`) {
		t.Errorf("the page shows an error")
	}

	shot := filepath.Join(out, "status.png")
	chromium(t, filepath.Join(out, "profile-shot"), "--virtual-time-budget=5000", "--hide-scrollbars", "--screenshot="+shot, srv.URL+"/")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() != 1200 || r.Dy() != 900 {
		t.Errorf("screenshot size: got %v, want 1200x900", r)
	}
	colors := map[uint32]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 7 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 7 {
			r, g, b, _ := img.At(x, y).RGBA()
			colors[(r>>8)<<16|(g>>8)<<8|b>>8] = true
		}
	}
	if len(colors) < 20 {
		t.Errorf("screenshot has %d distinct colours: the page did not render", len(colors))
	}
	t.Logf("screenshot: %s", shot)
}
