package ckptstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// Options configure a Local or a Remote store.
type Options struct {
	// Parallelism is how many files are hashed, uploaded or downloaded at
	// once. Default 8.
	Parallelism int
	// PendingGrace is how long Prune treats a partial upload (no manifest)
	// that is not newer than the newest complete one as possibly still
	// running in another process: its files and the shared files it
	// references are kept. Default 1 h.
	PendingGrace time.Duration
	// Registerer receives the store's metrics. Default nil: no
	// registration.
	Registerer prometheus.Registerer
	// Now returns the current time (only for ages of partial uploads and
	// manifest timestamps). Default time.Now.
	Now func() time.Time
}

// EnsureDefaults fills in zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Parallelism == 0 {
		o.Parallelism = 8
	}
	if o.PendingGrace == 0 {
		o.PendingGrace = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports every invalid field.
func (o *Options) Validate() error {
	var errs []error
	if o.Parallelism < 1 {
		errs = append(errs, fmt.Errorf("ckptstore: parallelism %d: want at least 1", o.Parallelism))
	}
	if o.PendingGrace < 0 {
		errs = append(errs, fmt.Errorf("ckptstore: pending grace %v: want at least 0", o.PendingGrace))
	}
	return errors.Join(errs...)
}

// metrics are a store's Prometheus metrics, labelled by kind (checkpoint,
// savepoint) or operation, with the backend (local, s3) as a constant label.
type metrics struct {
	uploaded   *prometheus.CounterVec   // bytes transferred by Upload
	reused     *prometheus.CounterVec   // bytes referenced instead of transferred
	files      *prometheus.CounterVec   // files transferred by Upload
	duration   *prometheus.HistogramVec // seconds per successful Upload
	failures   *prometheus.CounterVec   // failed operations
	pruned     prometheus.Counter       // shared files deleted by Prune
	downloaded prometheus.Counter       // bytes written by Download
}

func newMetrics(r prometheus.Registerer, backend string) (*metrics, error) {
	cl := prometheus.Labels{"backend": backend}
	m := &metrics{
		uploaded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "uploaded_bytes_total", ConstLabels: cl,
			Help: "Bytes of checkpoint and savepoint files transferred by uploads, by kind.",
		}, []string{"kind"}),
		reused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "reused_bytes_total", ConstLabels: cl,
			Help: "Bytes of files an upload referenced from earlier uploads instead of transferring, by kind.",
		}, []string{"kind"}),
		files: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "uploaded_files_total", ConstLabels: cl,
			Help: "Files transferred by uploads, by kind.",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "upload_duration_seconds", ConstLabels: cl,
			Help:    "Duration of successful uploads, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14), // 10 ms to about 80 s
		}, []string{"kind"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "failures_total", ConstLabels: cl,
			Help: "Failed store operations, by operation (upload, download, list, delete, prune, set_high, high).",
		}, []string{"op"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "pruned_shared_files_total", ConstLabels: cl,
			Help: "Shared table files deleted by prunes because nothing kept references them.",
		}),
		downloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "ckptstore", Name: "downloaded_bytes_total", ConstLabels: cl,
			Help: "Bytes written by downloads (restores).",
		}),
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.uploaded, m.reused, m.files, m.duration, m.failures, m.pruned, m.downloaded} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("ckptstore: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// fail counts a failed operation and returns err unchanged.
func (m *metrics) fail(op string, err error) error {
	if err != nil {
		m.failures.WithLabelValues(op).Inc()
	}
	return err
}

func (m *metrics) uploadDone(kind ckpt.Kind, st ckpt.UploadStats) {
	k := kind.String()
	m.uploaded.WithLabelValues(k).Add(float64(st.BytesUploaded))
	m.reused.WithLabelValues(k).Add(float64(st.BytesReused))
	m.files.WithLabelValues(k).Add(float64(st.FilesUploaded))
	m.duration.WithLabelValues(k).Observe(st.Duration.Seconds())
}
