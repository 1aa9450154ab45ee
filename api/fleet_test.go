package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/runtime"
)

// fleetWorker is a FleetWorker running one range.
type fleetWorker struct{}

func (fleetWorker) Status() map[string]runtime.Status {
	return map[string]runtime.Status{"kg0-64": {KeyGroups: "kg0-64", JobGen: 3}}
}
func (fleetWorker) Gatherer() prometheus.Gatherer { return prometheus.NewRegistry() }

// A fleet worker's HTTP server has the Host rule of adclick run's API: on
// loopback a rebound name gets 421 on every endpoint, a loopback or
// allowed name is answered, and beyond loopback the allowed hosts apply.
// Its status names the worker, the job and each range.
func TestFleetHandlerRefusesForeignHost(t *testing.T) {
	for _, c := range []struct {
		addr    string
		allowed []string
		host    string
		want    int
	}{
		{"127.0.0.1:9090", nil, "evil.example.com:9090", http.StatusMisdirectedRequest},
		{"127.0.0.1:9090", nil, "127.0.0.1:9090", http.StatusOK},
		{"127.0.0.1:9090", []string{"worker.internal"}, "worker.internal:9090", http.StatusOK},
		{"0.0.0.0:9090", []string{"worker.internal"}, "evil.example.com:9090", http.StatusMisdirectedRequest},
		{"0.0.0.0:9090", []string{"worker.internal"}, "worker.internal:9090", http.StatusOK},
		{"0.0.0.0:9090", nil, "evil.example.com:9090", http.StatusOK},
	} {
		h, err := FleetHandler(fleetWorker{}, "w1", "j", prometheus.NewRegistry(), c.addr, c.allowed)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/v1/status", "/metrics", "/healthz"} {
			r := httptest.NewRequest("GET", path, nil)
			r.Host = c.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != c.want {
				t.Errorf("listen %s, allowed %q: GET %s with Host %q: got %d, want %d", c.addr, c.allowed, path, c.host, rec.Code, c.want)
			}
			if path == "/v1/status" && rec.Code == http.StatusOK {
				var st FleetStatus
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Worker != "w1" || st.Job != "j" || st.Ranges["kg0-64"].JobGen != 3 {
					t.Errorf("status %s (%v); want worker w1, job j and range kg0-64", rec.Body, err)
				}
			}
		}
	}
	if _, err := FleetHandler(fleetWorker{}, "w1", "j", prometheus.NewRegistry(), "127.0.0.1:9090", []string{"http://x"}); err == nil {
		t.Error("a malformed allowed host was taken, want an error")
	}
}
