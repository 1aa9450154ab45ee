package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"net/url"
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

// checkToken returns nil if the request carries one of the tokens. Every
// configured token is compared, so the time taken does not tell which one
// (or whether any) matched.
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

// requireAdmin protects the operator endpoints. A request must come from
// no other origin (checkOrigin), carry the admin token, and send JSON if
// it sends a body (checkJSON). The token is what keeps other users and
// other machines out; the other two keep a web page open in the
// operator's browser from reaching the endpoints even if it could guess
// or replay the token. A server without an admin token keeps them closed.
func (s *Server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.NoOperator {
			writeError(w, errorf(http.StatusForbidden, codeForbidden, "operator endpoints are turned off on this server"))
			return
		}
		if e := s.checkOrigin(r); e != nil {
			writeError(w, e)
			return
		}
		if s.opts.AdminToken == "" {
			writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized,
				"this server has no admin token, so its operator endpoints are closed: start the job with --admin-token, or let adclick run generate one under --data"))
			return
		}
		if e := checkToken(r, s.opts.AdminToken); e != nil {
			writeError(w, e)
			return
		}
		if e := checkJSON(r); e != nil {
			writeError(w, e)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkOrigin refuses a request that a browser sent on behalf of a page
// of another origin:
//   - an Origin header (browsers send one with every cross-origin request
//     and every POST) must name the origin the request was sent to (its
//     Host), and "null" (sandboxed frames, file: pages) is refused;
//   - a Sec-Fetch-Site header must be same-origin or none (typed by the
//     user); same-site is refused too, since another port of the same host
//     is another origin;
//
// A page whose name was rebound to this server's address (DNS rebinding)
// is the same origin to its browser; the server's HostPolicy, in front of
// every route, refuses its Host before this check.
//
// Clients that are not browsers (adclick, curl) send none of these
// headers and pass.
func (s *Server) checkOrigin(r *http.Request) *apiError {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return errorf(http.StatusForbidden, codeForbidden, "operator request refused: sent by a page of another origin (Sec-Fetch-Site %s)", site)
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
		return errorf(http.StatusForbidden, codeForbidden, "operator request refused: Origin %q is not this server (Host %q)", o, r.Host)
	}
	return nil
}

// sameOrigin reports whether the Origin header value names the host and
// port r was sent to.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(withPort(u.Host, u.Scheme), withPort(r.Host, scheme))
}

// withPort returns host:port, adding the scheme's default port when host
// has none.
func withPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// checkJSON refuses a request body that is not declared JSON. Browsers
// send text/plain, form and multipart bodies to other origins without
// asking first; an application/json body needs a CORS preflight, which
// this server never grants.
func checkJSON(r *http.Request) *apiError {
	if r.ContentLength == 0 {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"operator request bodies must be JSON: send \"Content-Type: application/json\" (got %q), or no body", ct)
	}
	return nil
}
