package runtime

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// testLease is a Lease held until lose: Check then fails with the reason,
// every Guard context ends and Run returns.
type testLease struct {
	mu       sync.Mutex
	err      error
	released int
	ended    context.Context
	end      context.CancelFunc
}

func newTestLease() *testLease {
	ctx, cancel := context.WithCancel(context.Background())
	return &testLease{ended: ctx, end: cancel}
}

func (l *testLease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *testLease) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ended, cancel)
	return gctx, func() { stop(); cancel() }
}

func (l *testLease) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-l.ended.Done():
		return l.Check()
	}
}

func (l *testLease) Lost() <-chan struct{} { return l.ended.Done() }

func (l *testLease) Release(context.Context) error {
	l.mu.Lock()
	l.released++
	l.mu.Unlock()
	l.lose(errors.New("test lease: released"))
	return nil
}

func (l *testLease) lose(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
	l.end()
}

// expire makes Check fail while Lost stays open, as a lease whose
// renewals failed does until its holder notices: only the fence stops the
// writes then.
func (l *testLease) expire(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *testLease) releases() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

func leaseConfig(t *testing.T, l *testLease, acquireErr error) (Config, string) {
	t.Helper()
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(20_000, 3))
	cfg := replayConfig(filepath.Join(dir, "data"), path)
	cfg.Lease = &LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (Lease, error) {
		if acquireErr != nil {
			return nil, acquireErr
		}
		return l, nil
	}}
	return cfg, path
}

// A job that holds its lease throughout counts as without one, and
// releases the lease once, when it closes.
func TestLeaseHeldThroughout(t *testing.T) {
	l := newTestLease()
	cfg, path := leaseConfig(t, l, nil)
	j := runToEnd(t, cfg)
	checkRows(t, scanRows(t, j.Rows()), fileReference(t, path))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := l.releases(); n != 1 {
		t.Errorf("lease released %d times, want once", n)
	}
}

// A lease that cannot be taken refuses the start, before anything is
// restored or written.
func TestLeaseNotTakenRefusesTheStart(t *testing.T) {
	errHeld := errors.New("test lease: held by another process")
	cfg, _ := leaseConfig(t, nil, errHeld)
	j, err := Open(context.Background(), cfg)
	if err == nil {
		j.Close()
		t.Fatal("the job opened without its lease")
	}
	if !errors.Is(err, errHeld) || !strings.Contains(err.Error(), "job lease") {
		t.Errorf("open: got %v, want the lease's error", err)
	}
	for _, d := range []string{"store", "lake", "checkpoints"} {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a refused start (%v): it was opened before the lease", d, err)
		}
	}
}

// Once the lease is lost (Lost closed) the job stops without a final
// checkpoint; once it has expired (Check fails, Lost still open) every
// write is refused. Either way no write of the graph reaches the rows, the
// lake or the checkpoint store.
func TestLeaseLostFencesEveryWrite(t *testing.T) {
	errTaken := errors.New("test lease: taken over")
	for _, tc := range []struct {
		name string
		end  func(*testLease)
	}{
		{"lost", func(l *testLease) { l.lose(errTaken) }},
		{"expired", func(l *testLease) { l.expire(errTaken) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLease()
			cfg, _ := leaseConfig(t, l, nil)
			cfg.SinkOutageMs = 2_000 // refused writes end the run soon
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			j, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			tc.end(l)
			err = j.Run(ctx)
			if err == nil || !errors.Is(err, errTaken) {
				t.Fatalf("run after the lease ended: got %v, want an error wrapping the lease's", err)
			}
			if n := len(scanRows(t, j.Rows())); n != 0 {
				t.Errorf("%d rows written after the lease ended", n)
			}
			_ = filepath.WalkDir(filepath.Join(cfg.DataDir, "lake"), func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					t.Errorf("lake object %s written after the lease ended", p)
				}
				return nil
			})
			ids, err := j.ckpts.store.List(ctx, ckpt.Checkpoint)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != 0 {
				t.Errorf("checkpoints %v taken after the lease ended", ids)
			}
		})
	}
}
