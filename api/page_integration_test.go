//go:build integration

package api

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/runtime"
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

// screenshotPath is where TestStatusPageInChromium keeps its screenshot:
// $ADCLICK_SCREENSHOT, or status.png in dir.
func screenshotPath(t *testing.T, dir string) string {
	t.Helper()
	p := os.Getenv("ADCLICK_SCREENSHOT")
	if p == "" {
		return filepath.Join(dir, "status.png")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed for this test (apt-get install -y --no-install-recommends chromium): %v", err)
	}
}

// TestStatusPageInChromium loads the status page in headless Chromium
// against a server over the fake job, checks what the page shows after its
// script ran, and keeps a screenshot.
func TestStatusPageInChromium(t *testing.T) {
	needChromium(t)
	f := newFakeJob(t)
	// Every shard idle: the page must say the watermark cannot advance.
	for i := range f.st.Shards {
		f.st.Shards[i].Idle = true
	}
	// Three minutes of history up to now: the lag climbs from 6 s to 90 s
	// (a shard stalls), then falls back to 6 s when it is marked idle; 40
	// clicks a second are counted, and late ones come at 2/s while the
	// shard stalls and 0.5/s otherwise: 225 in all, 43 in the last minute
	// (samples 120 to 179), where 2,360 were counted.
	now := f.st.ProcessingMs + 300 // the server's clock: 10:15:07.5
	s, err := New(f, Options{Addr: "127.0.0.1:0", SampleEvery: -1, Gatherer: fakeJobRegistry(7200, 225), Clock: clock.NewVirtual(now)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.hist = newHistory(900) // drop the sample New took: history is chronological
	s.ckpts = newCkptLog(ckptLogSize)
	wm0 := f.st.WatermarkMs - 180_000
	var counted, late int64
	for i := int64(0); i < 180; i++ {
		lag := int64(6_000)
		if i >= 40 && i < 130 {
			lag = 6_000 + (i-40)*1_000
			late += 2
		} else if i%2 == 0 {
			late++
		}
		counted += 40
		at := now - (180-i)*1_000
		wm := wm0 + i*1_000 + 6_000 - lag
		c, l := counted, late
		s.hist.add(Sample{AtMs: at, WatermarkMs: &wm, LagMs: &lag, Counted: &c, Late: &l})
		if i%30 == 29 { // checkpoints 36 to 41, 30 s apart; 39 after 2 failed attempts
			failed := int64(0)
			if i >= 119 {
				failed = 2
			}
			id := 36 + i/30
			s.ckpts.see(&runtime.Meta{ID: id, TakenAtMs: f.st.LastCheckpoint.TakenAtMs - (41-id)*30_000, DurationMs: 100 + i,
				SizeBytes: (2 << 20) + i*4096}, &failed)
		}
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
		`41 at 10:15:01 (6.2 s)`,    // last checkpoint and its age
		`<td>S1</td>`, `<td>S2</td>`, `<td>S3</td>`,
		`idle (left out)`,
		`−46 s`,  // S3's watermark behind the job's (10:14:14.999 vs 10:15:00.999)
		`+1.0 s`, // S2 ahead
		`<td>ad_9</td>`, `<td>ad_7</td>`, `<td>ad_2</td>`,
		`id="lagchart" data-points="180"`,
		`id="wmchart" data-points="180"`,
		`id="latechart" data-points="179"`,

		// The hints: all shards idle, and Valkey down.
		`id="hints" class="wide" data-count="2" style="display: block;"`,
		`<li>all shards idle: the watermark cannot advance</li>`,
		`<li>Valkey does not answer`,
		// Spend with its unit.
		`spend (currency units)</th>`,
		`<td class="num" title="800,000 spend_micros">0.80</td>`,
		// Verdicts (of 7,428 clicks) and the late rate: 43 in 60 s, 43 of
		// 2,403 valid clicks.
		`<tr data-verdict="counted"><td>counted</td><td class="num">7,200</td><td class="num">96.9 %</td>`,
		`<tr data-verdict="late"><td>late</td><td class="num">225</td><td class="num">3.03 %</td>`,
		`<tr data-verdict="duplicate"><td>duplicate</td><td class="num">2</td><td class="num">0.03 %</td>`,
		`id="verdicttotal">7,428<`,
		`id="laterate">0.72 /s<`,
		`id="latefrac">1.79 %<`,
		// Checkpoints: counts and history, newest first.
		`id="ckptdone">4<`, `id="ckptfailed">1<`, `id="ckptfailing">0<`,
		`<tr><td>41</td>`, `<tr><td>36</td>`,
		`<td class="num warn">2</td>`, // checkpoint 39 came after 2 failed attempts
		// Sinks.
		`<tr data-sink="refused writes"><td>refused writes</td><td class="num warn">1</td>`,
		`<tr data-sink="row writes"><td>row writes</td><td class="num">32</td>`,
		`<tr data-sink="DynamoDB throttles"><td>DynamoDB throttles</td><td class="muted">not reported by this job</td>`,
		`<tr data-sink="Valkey"><td>Valkey</td><td class="num warn">DOWN</td>`,
		`<tr data-sink="running-total store"><td>running-total store</td><td class="num ok">up</td>`,
		// Billing finality.
		`<tr data-billing="closed through"><td>closed through</td><td>2026-11-29T09Z</td>`,
		`<tr data-billing="open from"><td>open from</td><td>2026-11-29T10Z</td>`,
		`<tr data-billing="ready for the recount through"><td>ready for the recount through</td><td>2026-11-29T07Z</td>`,
		`<tr data-billing="recounted through"><td>recounted through</td><td class="muted">not known to this server</td>`,
		`the recount reports no progress to this server (it runs outside this job, as adclick recount)`,
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
	checkAxisLabels(t, dom, "lagchart", "wmchart", "latechart")

	shot := screenshotPath(t, out)
	const width, height = 1280, 1900
	chromium(t, filepath.Join(out, "profile-shot"), "--virtual-time-budget=5000", "--hide-scrollbars",
		fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+shot, srv.URL+"/")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() != width || r.Dy() != height {
		t.Errorf("screenshot size: got %v, want %dx%d", r, width, height)
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

// checkAxisLabels fails the test if a chart drew no axis labels or the
// same label twice on one axis.
func checkAxisLabels(t *testing.T, dom string, charts ...string) {
	t.Helper()
	for _, id := range charts {
		m := regexp.MustCompile(`<canvas id="` + id + `"[^>]*>`).FindString(dom)
		if m == "" {
			t.Errorf("no canvas %s", id)
			continue
		}
		for _, axis := range []string{"xlabels", "ylabels"} {
			lm := regexp.MustCompile(`data-` + axis + `="([^"]*)"`).FindStringSubmatch(m)
			if lm == nil || lm[1] == "" {
				t.Errorf("%s: no %s in %s", id, axis, m)
				continue
			}
			labels := strings.Split(html.UnescapeString(lm[1]), "|")
			if len(labels) < 2 {
				t.Errorf("%s %s: got %q, want at least 2", id, axis, labels)
			}
			seen := map[string]bool{}
			for _, l := range labels {
				if seen[l] {
					t.Errorf("%s %s: label %q repeated in %q", id, axis, l, labels)
				}
				seen[l] = true
			}
		}
	}
}

// TestStatusPageFreshJobAxes: right after a start the history spans a few
// seconds and the watermark barely moves; the charts' axes must still
// label each tick once (they used to repeat "10:15:06" across a
// two-second span).
func TestStatusPageFreshJobAxes(t *testing.T) {
	needChromium(t)
	f := newFakeJob(t)
	s, err := New(f, Options{Addr: "127.0.0.1:0", SampleEvery: -1, Gatherer: fakeJobRegistry(-1, -1)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.hist = newHistory(900)
	now := time.Now().UnixMilli()
	for i := int64(0); i < 3; i++ {
		wm, lag, c, l := f.st.WatermarkMs+i*200, int64(6_000)+i*100, 40*i, i
		s.hist.add(Sample{AtMs: now - (3-i)*1_000, WatermarkMs: &wm, LagMs: &lag, Counted: &c, Late: &l})
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	dom := string(chromium(t, t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", srv.URL+"/"))
	if !strings.Contains(dom, `id="wmchart" data-points="3"`) {
		t.Fatalf("the watermark chart does not have the 3 samples")
	}
	checkAxisLabels(t, dom, "lagchart", "wmchart", "latechart")
}

// recorder wraps a handler and keeps the method, path, Origin and
// Content-Type of every request.
type recorder struct {
	h    http.Handler
	mu   sync.Mutex
	reqs []string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, fmt.Sprintf("%s %s origin=%q type=%q", r.Method, r.URL.Path, r.Header.Get("Origin"), r.Header.Get("Content-Type")))
	rc.mu.Unlock()
	rc.h.ServeHTTP(w, r)
}

func (rc *recorder) posts() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, r := range rc.reqs {
		if strings.HasPrefix(r, "POST ") {
			out = append(out, r)
		}
	}
	return out
}

// attackPage is a page of another origin that tries what any web page can
// do to a server on the operator's machine without a CORS preflight:
// no-cors fetches with text/plain bodies (one garbage, the others what the
// endpoints accept as JSON), and form posts into hidden frames.
const attackPage = `<!doctype html><html><body>
<iframe name="f1"></iframe><iframe name="f2"></iframe>
<form id="sp" method="POST" action="{{T}}/v1/savepoints" target="f1" enctype="text/plain"></form>
<form id="st" method="POST" action="{{T}}/v1/stop" target="f2"><input type="hidden" name="savepoint" value="true"></form>
<script>
"use strict";
var T = "{{T}}";
function post(path, body) {
  return fetch(T + path, {method: "POST", mode: "no-cors", body: body, headers: {"Content-Type": "text/plain"}})
    .then(function () { return "sent"; }, function (e) { return "error " + e; });
}
var loads = 0;
function loaded() { loads++; if (loads === 2) { document.body.dataset.forms = "posted"; } }
document.getElementsByName("f1")[0].onload = loaded;
document.getElementsByName("f2")[0].onload = loaded;
Promise.all([post("/v1/savepoints", "x"), post("/v1/savepoints", "{}"), post("/v1/stop", "{\"savepoint\":true}")]).then(function (r) {
  document.body.dataset.fetches = r.join(",");
  document.getElementById("sp").submit();
  document.getElementById("st").submit();
});
</script></body></html>`

// TestCrossOriginOperatorRequestsInChromium serves a page on one loopback
// port whose script and forms post to the job's API on another, in
// headless Chromium, and checks that the requests arrived and that none
// took a savepoint or stopped the job: with no admin token configured
// (the job as adclick run used to start it) and with one.
func TestCrossOriginOperatorRequestsInChromium(t *testing.T) {
	needChromium(t)
	for _, tok := range []string{"", adminTok} {
		t.Run(fmt.Sprintf("admin token %v", tok != ""), func(t *testing.T) {
			f := newFakeJob(t)
			ln := httptest.NewUnstartedServer(nil)
			s, err := New(f, Options{Addr: ln.Listener.Addr().String(), AdminToken: tok, SampleEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec := &recorder{h: s}
			ln.Config.Handler = rec
			ln.Start()
			defer ln.Close()
			page := strings.ReplaceAll(attackPage, "{{T}}", ln.URL)
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.Write([]byte(page))
			}))
			defer evil.Close()
			if evil.URL == ln.URL {
				t.Fatal("the two servers share an origin")
			}

			dom := string(chromium(t, t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", evil.URL+"/"))
			if !strings.Contains(dom, `data-fetches="sent,sent,sent"`) || !strings.Contains(dom, `data-forms="posted"`) {
				t.Fatalf("the attack page did not run to its end:\n%s", dom)
			}
			posts := rec.posts()
			t.Logf("requests the job's API received:\n%s", strings.Join(posts, "\n"))
			if len(posts) != 5 {
				t.Errorf("the API received %d POSTs, want 5 (3 fetches, 2 forms)", len(posts))
			}
			for _, p := range posts {
				if !strings.Contains(p, `origin="`+evil.URL+`"`) {
					t.Errorf("request %s: want it sent with Origin %s (a real cross-origin request)", p, evil.URL)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.spTaken != 0 || len(f.stops) != 0 {
				t.Errorf("a page of another origin took %d savepoints and stopped the job %d times, want none", f.spTaken, len(f.stops))
			}
		})
	}
}

// rebindPage reads the job's API as a page can once its own name resolves
// to the job's machine (DNS rebinding): same-origin fetches, whose answers
// the page may read, and puts what it got into the DOM.
const rebindPage = `<!doctype html><html><body><pre id="out"></pre>
<script>
"use strict";
var paths = ["/v1/status", "/v1/hours/2026-11-29T10Z", "/metrics", "/healthz"];
Promise.all(paths.map(function (p) {
  return fetch(p).then(function (r) {
    return r.text().then(function (t) { return {code: r.status, text: t}; });
  }, function (e) { return {code: "error " + e, text: ""}; });
})).then(function (rs) {
  document.getElementById("out").textContent = rs.map(function (r) { return r.text; }).join("\n");
  document.body.dataset.codes = rs.map(function (r) { return r.code; }).join(",");
});
</script></body></html>`

// TestDNSRebindingInChromium loads a page from rebind.example, which
// Chromium resolves to 127.0.0.1 (--host-resolver-rules), on the port of
// a loopback job API; the page stands for the attacker's page served
// before its name was rebound, so its fetches are same-origin to the
// browser. Every one must be refused (421) and the page must read nothing
// of the job. The same page loaded by a loopback name is answered, so the
// refusal is the Host's doing.
func TestDNSRebindingInChromium(t *testing.T) {
	needChromium(t)
	f := newFakeJob(t)
	ts := httptest.NewUnstartedServer(nil)
	s, err := New(f, Options{Addr: ts.Listener.Addr().String(), AdminToken: adminTok, SampleEvery: -1, Gatherer: fakeJobRegistry(7200, 225)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/rebind.html" { // the attacker's page, whatever the Host
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(rebindPage))
			return
		}
		s.ServeHTTP(w, r)
	})
	ts.Start()
	defer ts.Close()
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		name, host, codes string
		readsJob          bool
	}{
		{"rebound name", "rebind.example", "421,421,421,421", false},
		{"loopback name", "localhost", "200,200,200,200", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := fmt.Sprintf("http://%s:%d/rebind.html", c.host, port)
			dom := string(chromium(t, t.TempDir(), "--host-resolver-rules=MAP rebind.example 127.0.0.1",
				"--virtual-time-budget=10000", "--dump-dom", url))
			m := regexp.MustCompile(`data-codes="([^"]*)"`).FindStringSubmatch(dom)
			if m == nil {
				t.Fatalf("the page at %s did not run to its end:\n%s", url, dom)
			}
			if m[1] != c.codes {
				t.Errorf("page at %s: answers %s, want %s", url, m[1], c.codes)
			}
			// What only the job's answers hold: its job_gen, a metric.
			read := strings.Contains(dom, `"job_gen": 7`) || strings.Contains(dom, "adclick_")
			if read != c.readsJob {
				t.Errorf("page at %s read the job's status or metrics: got %v, want %v\n%.3000s", url, read, c.readsJob, dom)
			}
		})
	}
}
