package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// bearer returns the token of an "Authorization: Bearer <token>" header;
// ok is false when the header is absent or of another scheme.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// tokenEqual compares in constant time, whatever the lengths.
func tokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// checkToken returns nil if the request carries one of the tokens.
func checkToken(r *http.Request, tokens ...string) *apiError {
	tok, ok := bearer(r)
	if !ok {
		return errorf(http.StatusUnauthorized, codeUnauthorized, "missing bearer token: send the header \"Authorization: Bearer <token>\"")
	}
	match := false
	for _, t := range tokens {
		if t != "" && tokenEqual(tok, t) {
			match = true
		}
	}
	if !match {
		return errorf(http.StatusUnauthorized, codeUnauthorized, "wrong bearer token")
	}
	return nil
}

// requireRead protects the read endpoints when a read token is configured.
func (s *Server) requireRead(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.ReadToken != "" {
			if e := checkToken(r, s.opts.ReadToken, s.opts.AdminToken); e != nil {
				writeError(w, e)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// requireAdmin protects the operator endpoints: the admin token, or nothing
// on a loopback-only server without one (New checked that).
func (s *Server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.NoOperator {
			writeError(w, errorf(http.StatusForbidden, codeForbidden, "operator endpoints are turned off on this server"))
			return
		}
		if !s.opsOpen {
			if e := checkToken(r, s.opts.AdminToken); e != nil {
				writeError(w, e)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
