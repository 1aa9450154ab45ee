package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/adclick/adclick/runtime"
)

// FleetWorker is what a fleet worker's HTTP server reads (package fleet's
// Fleet): the status of each range it runs, and their metrics.
type FleetWorker interface {
	Status() map[string]runtime.Status
	Gatherer() prometheus.Gatherer
}

// FleetStatus is GET /v1/status of a fleet worker.
type FleetStatus struct {
	Worker string                    `json:"worker"`
	Job    string                    `json:"job"`
	Ranges map[string]runtime.Status `json:"ranges"`
}

// FleetHandler serves a fleet worker's read endpoints, behind the Host rule
// of adclick run's API (HostPolicy for addr, the address it listens on, and
// allowed), so a page rebound to the worker's address reads nothing:
// /metrics (reg's metrics and every running range's, labelled range),
// /healthz and /v1/status (FleetStatus: worker, job and each range's
// status). The operator endpoints of a single job (savepoints, stop,
// sweeps) are not served by a worker.
func FleetHandler(f FleetWorker, worker, job string, reg prometheus.Gatherer, addr string, allowed []string) (http.Handler, error) {
	hosts, err := NewHostPolicy(addr, allowed)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, f.Gatherer()}, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(FleetStatus{Worker: worker, Job: job, Ranges: f.Status()})
	})
	return hosts.Wrap(mux), nil
}
