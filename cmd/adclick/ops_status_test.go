package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/adclick/adclick/eventtime"
	"log/slog"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/adclick/adclick/api"
	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink/sinktest"
)

// statusJob is an opsJob with a fuller status: three shards, a checkpoint.
type statusJob struct {
	*opsJob
	st runtime.Status
}

func (j *statusJob) Status() runtime.Status { return j.st }

// statusServer serves the real API over a job whose status is st.
func statusServer(t *testing.T, st runtime.Status) string {
	t.Helper()
	job := &statusJob{opsJob: &opsJob{rows: sinktest.NewMemRows()}, st: st}
	s, err := api.New(job, api.Options{Addr: "127.0.0.1:0", AdminToken: "tok", SampleEvery: -1,
		Logger: slog.New(slog.DiscardHandler), Clock: clock.NewVirtual(st.ProcessingMs)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv.URL
}

// seedStatus is seed 001's snapshot W2: 10:15:07.2, S1 and S2 active, S3
// idle, watermark 10:15:00.999, checkpoint 41 taken at 10:15:01.
func seedStatus() runtime.Status {
	const (
		proc = 1_795_947_307_200 // 2026-11-29T10:15:07.2Z
		wm   = 1_795_947_300_999
	)
	return runtime.Status{JobGen: 8, Parallelism: 4, Source: "kinesis:clicks", Restored: 38, Ready: true,
		ProcessingMs: proc, WatermarkMs: wm, WatermarkLagMs: proc - wm, Records: 16, Invalid: 1,
		Shards: []ingest.ShardWatermark{
			{ID: "S1", Watermark: wm, MaxEventMs: wm + 5001, LastRecordMs: proc - 700},
			{ID: "S2", Watermark: wm + 1000, MaxEventMs: wm + 6001, LastRecordMs: proc - 100},
			{ID: "S3", Watermark: wm - 46_000, MaxEventMs: wm - 41_000, Idle: true, LastRecordMs: proc - 46_400},
		},
		LastCheckpoint: &runtime.Meta{ID: 41, JobGen: 8, TakenAtMs: proc - 6_200, DurationMs: 120, SizeBytes: 2 << 20, Parallelism: 4,
			Watermark: wm - 1000, Settings: "format=3 window_ms=60000 horizon_ms=7200000 dedup=true"},
	}
}

func TestStatusForPeople(t *testing.T) {
	url := statusServer(t, seedStatus())
	var out bytes.Buffer
	if err := cmdStatus(context.Background(), []string{"--api", url}, &out, &out); err != nil {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	want := `job         generation 8, parallelism 4, source kinesis:clicks, restored from checkpoint 38: running
watermark   2026-11-29T10:15:00.999Z (data complete through), lag 6.2s
records     16 read, 1 invalid
checkpoint  41, taken 2026-11-29T10:15:01.000Z (6.2s ago), 120 ms, 2.0 MiB
billing     closed through 2026-11-29T09Z, ready for the recount through 2026-11-29T07Z, recounted through not known to the job (only final hours are billable)
shards      3 (2 active, 1 idle, 0 closed)

SHARD  WATERMARK                 LAG   VS JOB  STATE                             CONSUMER LAG
S1     2026-11-29T10:15:00.999Z  6.2s  0s      active                            -
S2     2026-11-29T10:15:01.999Z  5.2s  +1s     active                            -
S3     2026-11-29T10:14:14.999Z  52s   -46s    idle (left out of the watermark)  -
`
	if out.String() != want {
		t.Errorf("status:\ngot:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestStatusAllIdleHint(t *testing.T) {
	st := seedStatus()
	for i := range st.Shards {
		st.Shards[i].Idle = true
	}
	url := statusServer(t, st)
	var out bytes.Buffer
	if err := cmdStatus(context.Background(), []string{"--api", url}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "\n\nall shards idle: the watermark cannot advance\n") {
		t.Errorf("status with every shard idle does not end with the hint:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "3 (0 active, 3 idle, 0 closed)") {
		t.Errorf("status does not count the idle shards:\n%s", out.String())
	}

	out.Reset()
	if err := cmdStatus(context.Background(), []string{"--api", url, "--json"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var js struct {
		AllIdle *bool    `json:"all_idle"`
		Hints   []string `json:"hints"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil {
		t.Fatalf("--json printed %v: %s", err, out.String())
	}
	if js.AllIdle == nil || !*js.AllIdle || len(js.Hints) != 1 {
		t.Errorf("--json: all_idle %v, hints %q; want true and the hint", js.AllIdle, js.Hints)
	}
}

// A job before its first watermark and checkpoint prints "none yet", not
// zero times.
func TestStatusForPeopleFreshJob(t *testing.T) {
	url := statusServer(t, runtime.Status{JobGen: 1, Parallelism: 2, Source: "gen", WatermarkMs: eventtime.NoWatermark, WatermarkLagMs: math.MaxInt64, ProcessingMs: 1_795_947_307_200})
	var out bytes.Buffer
	if err := cmdStatus(context.Background(), []string{"--api", url}, &out, &out); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(out.String()), " ")
	for _, w := range []string{"started with empty state: restoring (not ready)", "watermark none yet", "checkpoint none yet",
		"ready for the recount through not known before the first checkpoint", "shards 0 (0 active, 0 idle, 0 closed)"} {
		if !strings.Contains(got, w) {
			t.Errorf("status of a fresh job lacks %q:\n%s", w, out.String())
		}
	}
}
