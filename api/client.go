package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxAnswerBytes bounds what a Client reads of an answer.
const maxAnswerBytes = 4 << 20

// Client calls the HTTP API of a running job, as the operator commands
// (adclick savepoint, stop, sweep, status) do. Set Base; the other fields
// are optional. A Client is safe for concurrent use once set up.
type Client struct {
	// Base is the API's base URL, such as http://127.0.0.1:8080; a
	// trailing slash is ignored.
	Base string
	// Token is sent as "Authorization: Bearer <Token>"; empty sends none.
	// The operator endpoints need the admin token.
	Token string
	// Timeout bounds each call, the answer's body included; 0 leaves it
	// to ctx.
	Timeout time.Duration
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
}

// StatusError is an answer whose status is not 2xx. Code and Message are
// those of the error body {"error": {"code", "message"}}; for an answer
// that is not one, they are empty and Body holds the answer (trimmed).
type StatusError struct {
	Method, URL   string
	StatusCode    int    // 401
	Status        string // "401 Unauthorized"
	Code, Message string
	Body          string
}

func (e *StatusError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("api: %s %s: %s (%s): %s", e.Method, e.URL, e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("api: %s %s: %s: %s", e.Method, e.URL, e.Status, e.Body)
}

// Fetch sends a request to Base+path, with body (if not nil) encoded as
// JSON, and returns the JSON of a 2xx answer. An answer with another
// status is a *StatusError; an answer that is not JSON, or larger than
// 4 MiB, is an error.
func (c *Client) Fetch(ctx context.Context, method, path string, body any) ([]byte, error) {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	u := strings.TrimRight(c.Base, "/") + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("api: %s %s: encode body: %w", method, u, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("api: %s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if c.Timeout > 0 && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("api: %s %s: no answer within %v: %w", method, u, c.Timeout, err)
		}
		return nil, fmt.Errorf("api: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("api: %s %s: read answer: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Method: method, URL: u, StatusCode: resp.StatusCode, Status: resp.Status}
		var eb ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
			se.Code, se.Message = eb.Error.Code, eb.Error.Message
		} else {
			se.Body = strings.TrimSpace(string(b))
		}
		return nil, se
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("api: %s %s: the answer is not JSON: %.200q", method, u, b)
	}
	return b, nil
}

// Call is Fetch that copies the answer's JSON to w, indented, with a
// final newline.
func (c *Client) Call(ctx context.Context, method, path string, body any, w io.Writer) error {
	b, err := c.Fetch(ctx, method, path, body)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("api: %s %s: %w", method, path, err)
	}
	out.WriteByte('\n')
	if _, err := w.Write(out.Bytes()); err != nil {
		return fmt.Errorf("api: %s %s: write answer: %w", method, path, err)
	}
	return nil
}

// Status returns the job's status (GET /v1/status).
func (c *Client) Status(ctx context.Context) (StatusResponse, error) {
	b, err := c.Fetch(ctx, http.MethodGet, "/v1/status", nil)
	if err != nil {
		return StatusResponse{}, err
	}
	var st StatusResponse
	if err := json.Unmarshal(b, &st); err != nil {
		return StatusResponse{}, fmt.Errorf("api: GET %s/v1/status: %w", strings.TrimRight(c.Base, "/"), err)
	}
	return st, nil
}
