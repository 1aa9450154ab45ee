// Package api is the HTTP server of a running job: status, health,
// readiness and Prometheus metrics (and, as it grows, the dashboard,
// billing and operator endpoints), routed with chi.
package api
