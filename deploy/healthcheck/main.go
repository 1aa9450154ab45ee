// Command healthcheck is the container's health probe. The image has no
// shell and no curl, so the ECS task definition's HealthCheck and the
// Dockerfile's HEALTHCHECK run this instead: it GETs -url (the job's
// /healthz, which answers while the process is up) and exits 0 on a 2xx
// answer within -timeout, 1 otherwise.
//
// The job starts its HTTP API only after the restore and the full flush,
// which can take longer than any start period ECS allows (up to 300 s): a
// flush of a day's writes at 500 writes/s takes hours. So until the API
// has answered once, a refused connection means "starting", and the probe
// passes; the first 2xx answer creates the -started file, and from then on
// a refused connection fails it. A job that dies exits the container,
// which ECS sees without a probe; a job whose API stops answering is
// replaced after the task's retries.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/healthz", "URL to GET")
	timeout := flag.Duration("timeout", 4*time.Second, "give up after this long")
	started := flag.String("started", "", "file created once the URL has answered; until it exists, a refused connection counts as starting (empty: it never does)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ok, msg := probe(ctx, http.DefaultClient, *url, *started)
	fmt.Fprintln(os.Stderr, "healthcheck:", msg)
	if !ok {
		os.Exit(1)
	}
}

// probe GETs url and reports whether the container is healthy, and why.
func probe(ctx context.Context, c *http.Client, url, started string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, fmt.Sprintf("bad url %q: %v", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) && started != "" {
			if _, serr := os.Stat(started); errors.Is(serr, os.ErrNotExist) {
				return true, "not listening yet: starting (the API listens once restore and flush are done)"
			}
		}
		return false, fmt.Sprintf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return false, fmt.Sprintf("GET %s: %s", url, resp.Status)
	}
	if started != "" {
		if f, err := os.OpenFile(started, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		} else {
			return true, fmt.Sprintf("GET %s: %s (cannot record it: %v)", url, resp.Status, err)
		}
	}
	return true, fmt.Sprintf("GET %s: %s", url, resp.Status)
}
