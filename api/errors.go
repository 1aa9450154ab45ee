package api

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error codes of the JSON error body {"error": {"code", "message"}}.
const (
	codeBadRequest       = "bad_request"
	codeBadTime          = "bad_time"
	codeBadAd            = "bad_ad"
	codeRangeTooLarge    = "range_too_large"
	codeUnknownAd        = "unknown_ad"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeMisdirected      = "misdirected_request"
	codeTooLarge         = "body_too_large"
	codeUnsupportedMedia = "unsupported_media_type"
	codeConflict         = "conflict"
	codeTimeout          = "timeout"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
)

// apiError is an error with its HTTP status and a stable code.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return fmt.Sprintf("api: %d %s: %s", e.Status, e.Code, e.Message) }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorBody is the body of every 4xx and 5xx JSON answer.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	var b ErrorBody
	b.Error.Code, b.Error.Message = e.Code, e.Message
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="adclick"`)
	}
	writeJSON(w, e.Status, b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"api: encode response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
