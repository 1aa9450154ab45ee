package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
)

// Job is what the server needs of a running job; *runtime.Job satisfies it.
// Its methods must be safe for concurrent use.
type Job interface {
	// Status returns a snapshot of the job.
	Status() runtime.Status
	// Savepoint takes a savepoint and returns its metadata and path.
	Savepoint(ctx context.Context) (runtime.Meta, string, error)
	// Stop stops the job with a final checkpoint (and a savepoint of it if
	// savepoint is set).
	Stop(ctx context.Context, savepoint bool) (runtime.Meta, string, error)
	// Sweep removes what generation gen wrote since savepoint since, up to
	// epoch high (0 = the job's default).
	Sweep(ctx context.Context, gen, since, high int64) (flush.Report, error)
	// Rows returns the ad_metrics store.
	Rows() sink.Rows
	// Totals returns the running-total store; it may be nil.
	Totals() sink.Totals
}

var _ Job = (*runtime.Job)(nil)

// ConsumerLagger is implemented by a job that knows how far each shard's
// reader is behind the tip of its stream (Kinesis MillisBehindLatest). The
// status endpoint reports it per shard when the job implements it.
type ConsumerLagger interface {
	// ConsumerLagMs returns milliseconds behind the latest record, by shard id.
	ConsumerLagMs() map[string]int64
}

// ErrNoAdminToken is returned by New when the operator endpoints would be
// reachable from other machines without a token.
var ErrNoAdminToken = errors.New("api: operator endpoints need an admin token when the server is not bound to loopback")

// Limits of the API. Each bounds what one request can make the server hold
// in memory or ask of the stores.
const (
	// MaxMinutes is the widest range of GET /v1/ads/{ad}/minutes.
	MaxMinutes = 1440
	// MaxPageLimit is the largest page of GET /v1/hours/{hour}.
	MaxPageLimit = 1000
	// DefaultPageLimit is the page size when limit is not given.
	DefaultPageLimit = 100
	// MaxBodyBytes is the largest request body accepted.
	MaxBodyBytes = 4 << 10
	// MaxAdBytes is the longest ad id accepted, in bytes of UTF-8: the
	// longest ad_id ingest accepts.
	MaxAdBytes = ingest.MaxIDBytes
	// MaxTopAds is the most ads GET /v1/top-ads returns.
	MaxTopAds = 100
)

// Options configures a Server. The zero value serves read endpoints openly
// and keeps the operator endpoints closed (they need AdminToken).
type Options struct {
	// Addr is the address the server listens on (host:port). It decides
	// whether the operator endpoints may run without AdminToken: only on a
	// loopback address (see IsLoopback). Empty counts as not loopback.
	Addr string
	// AdminToken is the bearer token of the operator endpoints (savepoints,
	// sweeps, stop); they need it on every server, loopback included. It
	// also opens the read endpoints. Empty: the operator endpoints are
	// closed (401), and New refuses (ErrNoAdminToken) unless Addr is
	// loopback or NoOperator is set.
	AdminToken string
	// ReadToken, if not empty, protects the read endpoints (/v1/ads, /v1/hours,
	// /v1/status, /v1/top-ads): a request needs it or AdminToken. Default
	// empty: read endpoints are open. /, /healthz, /readyz and /metrics are
	// always open.
	ReadToken string
	// NoOperator turns the operator endpoints off; they answer 403.
	NoOperator bool
	// AllowedHosts are the Host names (or IP addresses; ".example.com" for
	// a domain and its subdomains) the server answers besides loopback
	// ones, on every endpoint (see HostPolicy): on a loopback Addr any
	// other Host gets 421, and on another Addr a non-empty list is the
	// only Hosts answered. Default none: a loopback server answers only
	// loopback Hosts, another server any Host.
	AllowedHosts []string
	// Registerer receives the server's HTTP metrics; nil = not registered.
	Registerer prometheus.Registerer
	// Gatherer is served at /metrics; nil = no /metrics endpoint.
	Gatherer prometheus.Gatherer
	// Logger logs operator actions; nil = slog.Default().
	Logger *slog.Logger
	// Clock stamps status samples; nil = the wall clock.
	Clock clock.Clock
	// SampleEvery is the interval of the status sampler behind the status
	// page's chart. Default 1 s; negative = no sampler goroutine.
	SampleEvery time.Duration
	// HistorySize is the number of samples kept (default 900: 15 minutes at
	// one a second).
	HistorySize int
	// OperatorTimeout bounds one operator action (default 5 minutes).
	OperatorTimeout time.Duration
	// TopKeys caps the running-total keys examined for GET /v1/top-ads
	// (default 2,000); past it the answer is marked truncated.
	TopKeys int
	// TopCacheFor is how long a top-ads answer is reused (default 2 s).
	TopCacheFor time.Duration

	// The limits of the http.Server built by HTTPServer and the listener
	// wrapped by Listener. Each bounds what idle, slow or many clients can
	// make the process hold: descriptors above all, which the job's own
	// stores (Pebble) need too.

	// ReadHeaderTimeout bounds the reading of a request's headers, and how
	// long a new connection may stay silent (default 5 s; it cannot be
	// turned off: negative also means the default).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included
	// (default 10 s; negative = none).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer (default 60 s; negative = none). The read endpoints
	// run under a context deadline a little shorter (see readBudget), so a
	// store read that runs out of time answers 504 timeout instead of
	// losing the connection; the operator endpoints get OperatorTimeout on
	// top of it.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request before the server closes it (default 30 s; negative = no
	// limit).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's headers, in bytes (default 32 KiB;
	// larger requests get 431).
	MaxHeaderBytes int
	// MaxConnections caps the connections the listener from Listener keeps
	// open at once (default DefaultMaxConnections; negative = no cap). See
	// Listener for what happens beyond it.
	MaxConnections int
}

// EnsureDefaults fills in the defaults of unset fields.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = time.Second
	}
	if o.HistorySize <= 0 {
		o.HistorySize = 900
	}
	if o.OperatorTimeout <= 0 {
		o.OperatorTimeout = 5 * time.Minute
	}
	if o.TopKeys <= 0 {
		o.TopKeys = 2000
	}
	if o.TopCacheFor == 0 {
		o.TopCacheFor = 2 * time.Second
	}
	defaultDuration(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	defaultDuration(&o.ReadTimeout, DefaultReadTimeout)
	defaultDuration(&o.WriteTimeout, DefaultWriteTimeout)
	defaultDuration(&o.IdleTimeout, DefaultIdleTimeout)
	if o.ReadHeaderTimeout < 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout // never none: it is what closes silent connections
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
}

// defaultDuration sets *d to def when it is 0.
func defaultDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

// IsLoopback reports whether addr (host:port, or a bare host) names only
// loopback interfaces: 127.0.0.0/8, ::1 or "localhost". An empty host
// (":8080") listens on every interface and is not loopback.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckOperatorAccess reports ErrNoAdminToken when a server listening on
// addr beyond loopback has no admin token: a misconfiguration, since such
// a server is meant to be operated from other machines. (Without a token
// the operator endpoints stay closed on any address.) Call it before
// listening to fail early with a clear message.
func CheckOperatorAccess(addr, adminToken string) error {
	if adminToken == "" && !IsLoopback(addr) {
		return fmt.Errorf("%w (listen address %q): set ADCLICK_ADMIN_TOKEN, or listen on 127.0.0.1", ErrNoAdminToken, addr)
	}
	return nil
}

// Server is the HTTP API of a job. It is an http.Handler; Close stops its
// status sampler. It is safe for concurrent use.
type Server struct {
	job   Job
	opts  Options
	h     http.Handler
	m     *metrics
	hist  *history
	top   topCache
	ckpts *ckptLog
	// hosts decides which Host headers are answered (DNS rebinding).
	hosts *HostPolicy

	conns   *connLimit
	errLog  *rateLog // the http.Server's ErrorLog
	connLog *rateLog // refused connections

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New returns the API server of job. Unless opts.SampleEvery is negative it
// starts a goroutine that samples job.Status() into the status page's
// history until Close.
func New(job Job, opts Options) (*Server, error) {
	opts.EnsureDefaults()
	if !opts.NoOperator {
		if err := CheckOperatorAccess(opts.Addr, opts.AdminToken); err != nil {
			return nil, err
		}
	}
	hosts, err := NewHostPolicy(opts.Addr, opts.AllowedHosts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{job: job, opts: opts, m: m, hist: newHistory(opts.HistorySize), ckpts: newCkptLog(ckptLogSize),
		hosts: hosts}
	s.conns = newConnLimit(opts.MaxConnections, m)
	s.errLog = newRateLog(opts.Logger, opts.Clock, "http server error", m.serverErrors)
	s.connLog = newRateLog(opts.Logger, opts.Clock, "http connection refused: connection cap reached, no connection idle", nil)
	s.h = s.routes()
	s.sample()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if opts.SampleEvery > 0 {
		s.wg.Go(func() { s.sampleLoop(ctx) })
	}
	return s, nil
}

// ServeHTTP serves a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

// Close stops the status sampler and waits for it. It does not close the
// job. It is safe to call more than once.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

func (s *Server) sampleLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample records one status sample, and the last checkpoint if it is new.
func (s *Server) sample() {
	st := s.job.Status()
	jm := s.jobMetrics()
	s.hist.add(sampleOf(s.opts.Clock.NowMs(), st, jm))
	s.ckpts.see(st.LastCheckpoint, jm.ckptFailed)
}

// Route patterns, also the route label of the HTTP metrics.
const (
	routePage      = "/"
	routeHealth    = "/healthz"
	routeReady     = "/readyz"
	routeMetrics   = "/metrics"
	routeMinutes   = "/v1/ads/{ad}/minutes"
	routeAdHour    = "/v1/ads/{ad}/hours/{hour}"
	routeHour      = "/v1/hours/{hour}"
	routeStatus    = "/v1/status"
	routeHistory   = "/v1/status/history"
	routeTop       = "/v1/top-ads"
	routeSavepoint = "/v1/savepoints"
	routeSweep     = "/v1/sweeps"
	routeStop      = "/v1/stop"
	routeOpenAPI   = "/v1/openapi.yaml"
	routeOther     = "other"
)

var allRoutes = []string{routePage, routeHealth, routeReady, routeMetrics, routeMinutes, routeAdHour,
	routeHour, routeStatus, routeHistory, routeTop, routeSavepoint, routeSweep, routeStop, routeOpenAPI, routeOther}

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.instrument, s.hosts.Wrap)
	r.Get(routePage, s.page)
	r.Get(routeHealth, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get(routeReady, s.ready)
	if s.opts.Gatherer != nil {
		r.Method(http.MethodGet, routeMetrics, promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	r.Get(routeOpenAPI, serveOpenAPI)
	r.Group(func(r chi.Router) {
		r.Use(s.readDeadline, s.requireRead)
		r.Get(routeMinutes, s.minutes)
		r.Get(routeAdHour, s.adHour)
		r.Get(routeHour, s.hour)
		r.Get(routeStatus, s.status)
		r.Get(routeHistory, s.history)
		r.Get(routeTop, s.topAds)
	})
	r.Group(func(r chi.Router) {
		r.Use(s.operatorDeadline, s.requireAdmin)
		r.Post(routeSavepoint, s.savepoint)
		r.Post(routeSweep, s.sweep)
		r.Post(routeStop, s.stop)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
	})
	return r
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	st := s.job.Status()
	switch {
	case st.Done:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "done", "reason": "the job has stopped"})
	case !st.Ready:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "restore and flush not finished, or sources not attached"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}
