package api

import (
	_ "embed"
	"net/http"
)

// statusPage is the status page: one self-contained HTML file (inline CSS
// and JavaScript, no external assets) that polls /v1/status,
// /v1/status/history and /v1/top-ads every 2 s and shows the job, its
// hints, charts of the watermark lag, the watermark and late clicks, the
// verdicts, shards, top ads (spend in currency units), checkpoints, sink
// health and billing finality. It only reads: it never needs the admin
// token. When read endpoints need a token, open it as /#token=<token>; the
// fragment never reaches the server.
//
//go:embed status.html
var statusPage []byte

//go:embed openapi.yaml
var openAPI []byte

func (s *Server) page(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	w.Write(statusPage)
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	w.Write(openAPI)
}
