package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's HTTP metrics.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	connsOpen       prometheus.Gauge   // connections held by Listener's listener
	connsRefused    prometheus.Counter // accepted and closed at once: cap reached, none idle
	connsIdleClosed prometheus.Counter // idle keep-alive connections closed to make room
	serverErrors    prometheus.Counter // lines the http.Server wrote to its ErrorLog
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_http_requests_total",
			Help: "HTTP API requests, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "adclick_http_request_duration_seconds",
			Help:    "HTTP API request latency, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"route"}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "adclick_http_connections_open",
			Help: "HTTP API connections open (accepted and not yet closed), at most Options.MaxConnections.",
		}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adclick_http_connections_refused_total",
			Help: "HTTP API connections closed as soon as accepted: the connection cap was reached and no open connection was idle.",
		}),
		connsIdleClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adclick_http_connections_idle_closed_total",
			Help: "Idle keep-alive HTTP API connections closed to make room for a new one at the connection cap.",
		}),
		serverErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adclick_http_server_errors_total",
			Help: "Errors the HTTP server logged (accept errors, bad requests, handler panics), including those the log's rate limit dropped.",
		}),
	}
	// Every route's success series exists from the start, at zero.
	for _, rt := range allRoutes {
		m.duration.WithLabelValues(rt)
		m.requests.WithLabelValues(rt, "200")
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration, m.connsOpen, m.connsRefused, m.connsIdleClosed, m.serverErrors} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("api: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts requests by route pattern (never by raw path, so that
// ad ids do not become label values) and code.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := routeOther
		if rc := chi.RouteContext(r.Context()); rc != nil {
			if p := rc.RoutePattern(); p != "" && p != "/*" {
				route = p
			}
		}
		known := false
		for _, rt := range allRoutes {
			if rt == route {
				known = true
				break
			}
		}
		if !known {
			route = routeOther
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		s.m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}
