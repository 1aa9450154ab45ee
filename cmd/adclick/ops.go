package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/adclick/adclick/api"
)

// The operator commands call the HTTP API of a running job (adclick run
// --listen). savepoint, stop and sweep print the API's JSON answer on
// stdout; status prints a summary for people, or the JSON with --json.
//
// The operator endpoints need the admin token. The commands take it from
// --token, ADCLICK_TOKEN or ADCLICK_ADMIN_TOKEN, or else, for a job on
// this machine (a loopback --api), from the file <--data>/admin-token
// that adclick run wrote.

const (
	savepointSummary = `Takes a savepoint of the running job (POST /v1/savepoints) and prints its
metadata, including its id and path. Start another version from it with
"adclick run --from-savepoint ID --job-gen G" (blue/green, rescaling,
upgrades).`
	stopSummary = `Stops the running job with a final checkpoint (POST /v1/stop); with
--savepoint it also keeps a savepoint of that checkpoint, the in-place way to
upgrade or rescale.`
	sweepSummary = `Runs the second sweep after a blue/green switch (POST /v1/sweeps), on the new
version's job: once the old version (generation --gen) has stopped writing,
it removes what that generation wrote since savepoint --since. Run it only
after the old version has stopped.`
	statusSummary = `Prints the running job's status (GET /v1/status) for people: the watermark and
its lag, each shard's watermark, lag and state, the last checkpoint and its
age, late clicks, the stores' health, which hours are closed or ready for
the recount, and hints such as "all shards idle: the watermark cannot
advance". --json prints the API's JSON answer instead.`
)

// opsFlags are the flags shared by the operator commands.
type opsFlags struct {
	base    string
	token   string
	data    string
	timeout time.Duration
	// tokenNote says where the token came from, or why none was found in
	// the data directory; it is added to a 401's error.
	tokenNote string
}

func (c *opsFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&c.base, "api", "http://127.0.0.1:8080", "base URL of the job's HTTP API")
	fs.StringVar(&c.token, "token", "", "bearer token of the API (default: $ADCLICK_ADMIN_TOKEN, else for a loopback --api the token adclick run wrote to <--data>/"+adminTokenFile+")")
	fs.StringVar(&c.data, "data", "./adclick-data", "the job's data directory, where adclick run keeps the admin token it generated (used when no token is given and --api is loopback)")
	fs.DurationVar(&c.timeout, "timeout", timeout, "give up after this long")
}

// check validates the flags after parsing.
func (c *opsFlags) check() error {
	u, err := url.Parse(c.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--api %q: want an http:// or https:// URL such as http://127.0.0.1:8080", c.base)}
	}
	c.base = strings.TrimRight(c.base, "/")
	if c.timeout <= 0 {
		return usageError{fmt.Errorf("--timeout %v: want a positive duration", c.timeout)}
	}
	if c.token == "" {
		c.token = os.Getenv("ADCLICK_ADMIN_TOKEN")
	}
	if c.token == "" {
		c.tokenFromData(u.Host)
	}
	return nil
}

// tokenFromData reads the admin token adclick run wrote under --data, for
// a job on this machine only: a token of this machine's job is not sent
// to another host.
func (c *opsFlags) tokenFromData(host string) {
	path := adminTokenPath(c.data)
	if !api.IsLoopback(host) {
		c.tokenNote = fmt.Sprintf("the token file under --data (%s) is only used for a loopback --api", path)
		return
	}
	tok, err := readAdminToken(path)
	switch {
	case err == nil:
		c.token = tok
		c.tokenNote = "the token was read from " + path + "; is --data the job's?"
	case errors.Is(err, os.ErrNotExist):
		c.tokenNote = fmt.Sprintf("no token file %s: give --data of the job (adclick run writes its token there)", path)
	default:
		c.tokenNote = err.Error()
	}
}

// client returns the API client of the checked flags.
func (c *opsFlags) client() *api.Client {
	return &api.Client{Base: c.base, Token: c.token, Timeout: c.timeout}
}

// call sends a request (api.Client.Call): a successful answer is copied,
// indented, to stdout.
func (c *opsFlags) call(ctx context.Context, method, path string, body any, stdout io.Writer) error {
	return c.explain(c.client().Call(ctx, method, path, body, stdout))
}

// explain adds to an error of the client the flags that may cure it.
func (c *opsFlags) explain(err error) error {
	var se *api.StatusError
	var ue *url.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.StatusCode == http.StatusUnauthorized && se.Code != "":
		hint := "pass --token or set ADCLICK_TOKEN"
		if c.tokenNote != "" {
			hint += " (" + c.tokenNote + ")"
		}
		return fmt.Errorf("%w; %s", err, hint)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (--timeout)", err)
	case errors.As(err, &ue):
		return fmt.Errorf("%w (is the job running with its HTTP API on --api?)", err)
	}
	return err
}

func cmdSavepoint(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("savepoint", savepointSummary, stderr)
	var c opsFlags
	c.register(fs, 10*time.Minute)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/savepoints", nil, stdout)
}

func cmdStop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("stop", stopSummary, stderr)
	var c opsFlags
	c.register(fs, 10*time.Minute)
	savepoint := fs.Bool("savepoint", false, "keep a savepoint of the final checkpoint")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/stop", map[string]bool{"savepoint": *savepoint}, stdout)
}

// optInt64 is an int64 flag that knows whether it was given.
type optInt64 struct {
	v   int64
	set bool
}

func (o *optInt64) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt64) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("want an integer")
	}
	o.v, o.set = v, true
	return nil
}

func cmdSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sweep", sweepSummary, stderr)
	var c opsFlags
	c.register(fs, 30*time.Minute)
	var gen, since optInt64
	fs.Var(&gen, "gen", "job generation of the old version, whose writes are removed (required)")
	fs.Var(&since, "since", "id of the savepoint the new version started from (required)")
	high := fs.Int64("high", 0, "last epoch to sweep (0 = the job's default: its current epoch plus a margin)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var missing []string
	if !gen.set {
		missing = append(missing, "--gen")
	}
	if !since.set {
		missing = append(missing, "--since")
	}
	if len(missing) > 0 {
		return usageError{fmt.Errorf("missing %s", strings.Join(missing, " and "))}
	}
	if gen.v < 1 || since.v < 0 || *high < 0 {
		return usageError{fmt.Errorf("--gen %d, --since %d, --high %d: want gen >= 1, since >= 0, high >= 0", gen.v, since.v, *high)}
	}
	if err := c.check(); err != nil {
		return err
	}
	body := map[string]int64{"gen": gen.v, "since": since.v}
	if *high > 0 {
		body["high"] = *high
	}
	return c.call(ctx, http.MethodPost, "/v1/sweeps", body, stdout)
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", statusSummary, stderr)
	var c opsFlags
	c.register(fs, 10*time.Second)
	asJSON := fs.Bool("json", false, "print the API's JSON answer (GET /v1/status) instead of the summary")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if *asJSON {
		return c.call(ctx, http.MethodGet, "/v1/status", nil, stdout)
	}
	st, err := c.client().Status(ctx)
	if err != nil {
		return c.explain(err)
	}
	return printStatus(stdout, st)
}
