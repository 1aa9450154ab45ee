// Package api is the HTTP server of a running job, routed with chi: the
// dashboards' running totals, billing's hour rows, the job's status, the
// operator actions (savepoint, second sweep, stop), health, readiness,
// Prometheus metrics and a self-contained status page.
//
// Endpoints (JSON unless stated; api/openapi.yaml has the details):
//
//	GET  /                              status page (HTML)
//	GET  /healthz                       the process is up
//	GET  /readyz                        restore and flush done, sources attached (503 otherwise)
//	GET  /metrics                       Prometheus exposition
//	GET  /v1/ads/{ad}/minutes?from=&to= running totals of the minutes starting in [from, to), ≤ 1,440
//	GET  /v1/ads/{ad}/hours/{hour}      an hour row: fast, late, final, status open|provisional|final
//	GET  /v1/hours/{hour}?cursor=&limit= every ad's row of an hour, in ad order, ≤ 1,000 a page
//	GET  /v1/status                     watermark, shards, last checkpoint, verdicts, sink health, billing finality, hints
//	GET  /v1/status/history             the sampled watermark, lag and click counts, the last checkpoints seen
//	GET  /v1/top-ads?limit=             ads by running total over the current minutes
//	POST /v1/savepoints                 take a savepoint                        (operator)
//	POST /v1/sweeps {gen, since, high}  second sweep after blue/green           (operator)
//	POST /v1/stop {savepoint}           stop with a final checkpoint/savepoint  (operator)
//	GET  /v1/openapi.yaml               the OpenAPI document of all of these
//
// {ad} is any id ingest accepts as a click's ad_id (1 to 256 bytes of valid
// UTF-8, any characters), percent-encoded as one path segment: "ad 7/b" is
// /v1/ads/ad%207%2Fb/... .
//
// Times are accepted as RFC 3339 (2026-11-29T10:14:05Z), as a minute
// (2026-11-29T10:14Z) or as an hour (2026-11-29T10Z), optionally with the
// table's bucket prefix M or H; all are UTC unless an RFC 3339 offset says
// otherwise. Answers give times as RFC 3339 UTC with milliseconds and as
// Unix ms.
//
// Only an hour whose status is final (the recount wrote final_*) is
// billable; open means the job watermark has not passed the hour's last
// millisecond, provisional that it has but the recount has not run.
//
// Operator endpoints need "Authorization: Bearer <AdminToken>" on every
// server, loopback included: any web page the operator has open can send
// requests to 127.0.0.1. A server without an admin token keeps them closed
// (adclick run generates one under --data), and New refuses a server
// beyond loopback without one. They also refuse what a browser sends for
// a page of another origin (an Origin other than the server,
// Sec-Fetch-Site cross-site or same-site) and request bodies that are not
// application/json (415). Tokens are compared in constant time and never
// logged.
//
// Every endpoint, in front of everything else, refuses with 421 a Host
// the server does not answer (HostPolicy, against DNS rebinding): a
// loopback server answers loopback Hosts and Options.AllowedHosts only.
//
// Read endpoints are open unless Options.ReadToken is set. Errors are
// {"error": {"code", "message"}} with a 4xx status for bad input (bad_time,
// bad_ad, range_too_large, unknown_ad, bad_request, unauthorized,
// body_too_large, ...). Request bodies are limited to MaxBodyBytes and every
// answer is bounded (MaxMinutes, MaxPageLimit, MaxTopAds).
//
// Serve a Server with the http.Server of HTTPServer on the listener of
// Listener: the server has header, read, write and idle timeouts, a cap on
// header size and a rate-limited error log; the listener caps the open
// connections (Options.MaxConnections, default 256), making room by
// closing the longest-idle keep-alive connection and refusing new ones
// when none is idle, so that clients which connect and linger cannot use
// up the descriptors the job's stores need.
//
// Client is the other side, as the operator commands use it: Fetch, Call
// and Status send a request with the bearer token and a timeout, and turn
// an error answer into a *StatusError with the API's code and message.
//
// A Server samples the job's status once a second for the charts and the
// checkpoint history, in a goroutine that Close stops. The status reads
// the job's verdict, checkpoint, sink and recount counts from
// Options.Gatherer (the registry the job's metrics are on); what it does
// not find there it reports as null rather than 0.
package api
