package runtime

import (
	"context"
	"errors"
	"github.com/adclick/adclick/ingest/source"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// failingRows is a row store whose Puts fail with err from the n-th call
// on (a store that has gone away for good, as the DynamoDB adapter reports
// once its retries are spent).
type failingRows struct {
	*sinktest.MemRows
	after int64
	calls atomic.Int64
	err   error
}

func (f *failingRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	if f.calls.Add(1) > f.after {
		return 0, f.err
	}
	return f.MemRows.Put(ctx, puts)
}

// downStore is a checkpoint store whose uploads fail (S3 down).
type downStore struct {
	ckpt.Store
	err error
}

func (d downStore) Upload(context.Context, string, int64, ckpt.Kind) (ckpt.UploadStats, error) {
	return ckpt.UploadStats{}, d.err
}

// runBounded runs j and returns Run's error, failing the test if Run has
// not returned within limit (a hung job: the defect these tests guard).
// While it runs it samples Status and reports whether the job was seen not
// ready before it was done.
func runBounded(t *testing.T, j *Job, limit time.Duration) (err error, sawNotReady bool) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- j.Run(context.Background()) }()
	deadline := time.After(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	wasReady := false
	for {
		select {
		case err := <-errc:
			return err, sawNotReady
		case <-tick.C:
			st := j.Status()
			if st.Ready {
				wasReady = true
			} else if wasReady && !st.Done {
				sawNotReady = true
			}
		case <-deadline:
			t.Fatalf("Run has not returned after %s: the job hangs", limit)
		}
	}
}

// TestFailingSinkEndsTheJob: a row store that fails for good ends the job
// with that error — not a hang (the subtasks used to wait on their inputs
// for ever after the graph failed) and not "context canceled" (the first
// error kept used to be the cancellation that followed the real one).
func TestFailingSinkEndsTheJob(t *testing.T) {
	boom := errors.New("write fast rows: gave up after 15 attempts")
	path := writeTrace(t, t.TempDir(), traceOptions(4000, 3))
	cfg := replayConfig(t.TempDir(), path)
	cfg.Rows = &failingRows{MemRows: sinktest.NewMemRows(), after: 3, err: boom}
	j, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	err, _ = runBounded(t, j, 30*time.Second)
	if !errors.Is(err, boom) || errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want the store's error as the root cause", err)
	}
	if st := j.Status(); st.Ready || !st.Done {
		t.Fatalf("after the failure: ready %v, done %v; want not ready, done", st.Ready, st.Done)
	}
}

// TestCheckpointStoreDownEndsTheJob: with the checkpoint store down, every
// checkpoint fails; each failure is counted and retried with backoff while
// the job reports not ready, and once failures have lasted the checkpoint
// timeout the job ends with the store's error. It used to hang for ever
// with /readyz saying ready and the failed-checkpoint counter at 0.
func TestCheckpointStoreDownEndsTheJob(t *testing.T) {
	down := errors.New("s3: connection refused")
	dir := t.TempDir()
	local, err := ckptstore.NewLocal(dir, ckptstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{
		DataDir: dir, Source: "gen", Parallelism: 2, Registerer: reg,
		OpenSource:           source.Gen(ingest.GenOptions{Ads: 20, Shards: 2, Rate: 500, Seed: 3}),
		CheckpointIntervalMs: 200, CheckpointTimeoutMs: 1_500,
		Checkpoints: downStore{Store: local, err: down},
	}
	useLocalStores(&cfg)
	j, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	start := time.Now()
	err, sawNotReady := runBounded(t, j, 30*time.Second)
	if !errors.Is(err, down) {
		t.Fatalf("Run = %v; want the checkpoint store's error", err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("the job gave up after %s, before the checkpoint timeout", d)
	}
	if !sawNotReady {
		t.Error("the job never reported not ready while its checkpoints failed")
	}
	failed, _ := metricValueLabel(t, reg, "adclick_checkpoints_total", "result", "failed")
	if failed < 2 {
		t.Errorf("failed checkpoints counted: %v; want at least 2 (retries)", failed)
	}
}

// transientErr is an error a row store marks transient (as sink/dynamo's
// *TransientError does once its own retries are spent).
type transientErr struct{}

func (transientErr) Error() string   { return "row store: throttled (gave up after 15 attempts)" }
func (transientErr) Transient() bool { return true }

// outageRows fails every Put with a transient error until its outage ends.
type outageRows struct {
	*sinktest.MemRows
	until time.Time
	fails atomic.Int64
}

func (o *outageRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	if time.Now().Before(o.until) {
		o.fails.Add(1)
		return 0, transientErr{}
	}
	return o.MemRows.Put(ctx, puts)
}

// TestShortRowStoreOutageIsWaitedOut: a row store that throttles for a few
// seconds does not end the job (it used to end it once the adapter's 15
// attempts were spent, with "context canceled"); the rows end exact. A
// store that stays unavailable past --sink-outage-ms ends it with the
// store's error.
func TestShortRowStoreOutageIsWaitedOut(t *testing.T) {
	path := writeTrace(t, t.TempDir(), traceOptions(3000, 8))
	t.Run("short", func(t *testing.T) {
		rows := &outageRows{MemRows: sinktest.NewMemRows(), until: time.Now().Add(2500 * time.Millisecond)}
		cfg := replayConfig(t.TempDir(), path)
		cfg.Rows = rows
		j, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		if err, _ := runBounded(t, j, 60*time.Second); err != nil {
			t.Fatalf("Run = %v; want the outage waited out", err)
		}
		if rows.fails.Load() == 0 {
			t.Fatal("the outage was never met: the test tests nothing")
		}
		checkRows(t, scanRows(t, rows.MemRows), fileReference(t, path))
	})
	t.Run("too long", func(t *testing.T) {
		rows := &outageRows{MemRows: sinktest.NewMemRows(), until: time.Now().Add(time.Hour)}
		cfg := replayConfig(t.TempDir(), path)
		cfg.Rows, cfg.SinkOutageMs = rows, 1500
		j, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		err, _ = runBounded(t, j, 60*time.Second)
		var te transientErr
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "unavailable for") {
			t.Fatalf("Run = %v; want the store's error after the outage budget", err)
		}
	})
}
