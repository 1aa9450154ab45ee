package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/runtime"
)

// loadOpenAPI loads and validates the served document (api/openapi.yaml).
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// TestOpenAPIDocument: every operation has a unique operationId, and every
// answer it documents says what its body is.
func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", where)
			} else if prev, dup := ids[op.OperationID]; dup {
				t.Errorf("%s: operationId %q already used by %s", where, op.OperationID, prev)
			}
			ids[op.OperationID] = where
			if op.Responses.Len() == 0 {
				t.Errorf("%s: no responses", where)
			}
			for code, ref := range op.Responses.Map() {
				if ref.Value == nil || len(ref.Value.Content) == 0 {
					t.Errorf("%s %s: no content", where, code)
					continue
				}
				for ct, mt := range ref.Value.Content {
					if ct != "text/html" && mt.Schema == nil {
						t.Errorf("%s %s %s: no schema", where, code, ct)
					}
				}
			}
		}
	}
}

// routesOf lists the server's routes as "METHOD pattern".
func routesOf(t *testing.T, s *Server) []string {
	t.Helper()
	var out []string
	err := chi.Walk(s.h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestOpenAPICoversTheRouter: the document has an operation for every
// route of the server (with every optional endpoint on), and no other.
func TestOpenAPICoversTheRouter(t *testing.T) {
	doc := loadOpenAPI(t)
	reg := prometheus.NewRegistry()
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok, Gatherer: reg})
	routes := routesOf(t, s)
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	sort.Strings(documented)
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("openapi.yaml documents %s, which the server does not route", d)
		}
	}
	if len(routes) < 14 {
		t.Errorf("walked %d routes, want every one of the server's (%v)", len(routes), routes)
	}
}

// openAPICases are the golden cases and a few more answers: the refused
// operator requests, the metric-backed status, the non-JSON endpoints.
func openAPICases() []apiCase {
	cases := goldenCases()
	reg := func() *prometheus.Registry { return fakeJobRegistry(-1, -1) }
	return append(cases,
		apiCase{name: "status_metrics_history", method: "GET", path: "/v1/status/history", want: 200,
			opts: &Options{AdminToken: adminTok, Gatherer: reg()}},
		apiCase{name: "metrics", method: "GET", path: "/metrics", want: 200, opts: &Options{AdminToken: adminTok, Gatherer: reg()}},
		apiCase{name: "openapi", method: "GET", path: "/v1/openapi.yaml", want: 200},
		apiCase{name: "page", method: "GET", path: "/", want: 200},
		apiCase{name: "savepoint_no_admin_token", method: "POST", path: "/v1/savepoints", want: 401, opts: &Options{Addr: "127.0.0.1:8080"}},
		apiCase{name: "read_status_history_token", method: "GET", path: "/v1/status/history", want: 401, opts: &Options{AdminToken: adminTok, ReadToken: readTok}},
		apiCase{name: "top_no_totals", method: "GET", path: "/v1/top-ads", want: 503, setup: func(f *fakeJob) { f.totals = nil }},
		apiCase{name: "stop_failed", method: "POST", path: "/v1/stop", token: adminTok, want: 500,
			setup: func(f *fakeJob) { f.stopErr = context.Canceled }},
		apiCase{name: "stop_timeout", method: "POST", path: "/v1/stop", token: adminTok, want: 504,
			setup: func(f *fakeJob) { f.stopErr = context.DeadlineExceeded }},
		apiCase{name: "sweep_not_running", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": 41}`, want: 409,
			setup: func(f *fakeJob) { f.sweepErr = runtime.ErrNotRunning }},
		apiCase{name: "sweep_body_too_large_stop", method: "POST", path: "/v1/stop", token: adminTok, body: `{"savepoint": true, "x": "` + strings.Repeat("y", MaxBodyBytes) + `"}`, want: 413},
	)
}

// TestOpenAPIResponses sends every request of openAPICases to the real
// server (over the in-memory fakes) and validates each answer, status
// code included, against the operation the document gives for it. A
// request the document has no operation for must be one the router has
// none for either (404, 405), answered with the error body.
func TestOpenAPIResponses(t *testing.T) {
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	hit := map[string]bool{}
	for _, c := range openAPICases() {
		t.Run(c.name, func(t *testing.T) {
			_, req, rec := serveCase(t, c)
			if rec.Code != c.want {
				t.Errorf("got status %d, want %d: %s", rec.Code, c.want, rec.Body.String())
			}
			route, params, err := router.FindRoute(req)
			if err != nil {
				if !(errorsIsRoute(err) && (rec.Code == http.StatusNotFound || rec.Code == http.StatusMethodNotAllowed)) {
					t.Fatalf("%s %s: no operation in openapi.yaml (%v), answered %d", c.method, c.path, err, rec.Code)
				}
				var body any
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
					t.Fatalf("answer is not JSON: %v", err)
				}
				if err := doc.Components.Schemas["Error"].Value.VisitJSON(body); err != nil {
					t.Errorf("%d answer does not match the Error schema: %v", rec.Code, err)
				}
				return
			}
			hit[route.Operation.OperationID] = true
			in := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
				Status:                 rec.Code,
				Header:                 rec.Header(),
				Body:                   io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
				Options:                opts,
			}
			if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
				t.Errorf("%s %s answered %d, which does not match openapi.yaml (%s):\n%v\nbody: %.2000s",
					c.method, c.path, rec.Code, route.Operation.OperationID, err, rec.Body.String())
			}
		})
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !hit[op.OperationID] {
				t.Errorf("%s %s (%s): no answer validated", method, path, op.OperationID)
			}
		}
	}
}

// TestOpenAPIValidationCanFail: an answer that breaks the document is
// caught (a required field missing, a field the schema does not have).
func TestOpenAPIValidationCanFail(t *testing.T) {
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{`{"samples": []}`, `{"samples": [], "checkpoints": [], "extra": 1}`, `{"samples": [{"at_ms": "now"}], "checkpoints": []}`} {
		req := newRequest("GET", "/v1/status/history", "", "")
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 200,
			Header:                 http.Header{"Content-Type": {"application/json"}},
			Body:                   io.NopCloser(strings.NewReader(body)),
			Options:                &openapi3filter.Options{IncludeResponseStatus: true},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), in); err == nil {
			t.Errorf("body %d %s: validated, want an error", i, body)
		}
	}
	req := newRequest("GET", "/v1/status", "", "")
	route, params, _ := router.FindRoute(req)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 418, Header: http.Header{"Content-Type": {"application/json"}},
		Body:    io.NopCloser(strings.NewReader(`{}`)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err == nil {
		t.Errorf("an undocumented status (418) validated, want an error")
	}
}

func errorsIsRoute(err error) bool {
	return errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed)
}
