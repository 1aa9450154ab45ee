package api

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// HostPolicy decides which Host headers a server answers, the defence
// against DNS rebinding: a web page on attacker.example whose name the
// attacker then points at 127.0.0.1 (or at a server's private address)
// sends requests that its browser takes for the page's own origin, so the
// page can read the answers (job status, rows, spend) although it could
// never reach the server by its real name. Such a request still names the
// page's host in its Host header; refusing foreign Hosts closes the hole
// on every endpoint, read endpoints included.
//
// The rule:
//   - a loopback name or address (localhost, 127.0.0.0/8, ::1) is always
//     answered: only a page loaded from that very name sends it;
//   - a host in the allowed list is answered; an entry ".example.com"
//     allows example.com and every name under it;
//   - any other Host is answered only by a server that listens beyond
//     loopback and has no allowed list (there the network decides who
//     reaches it); a loopback-only server, or any server given a list,
//     refuses it with 421 Misdirected Request.
//
// Hosts are compared without port, case or a trailing dot. A HostPolicy
// is immutable and safe for concurrent use.
type HostPolicy struct {
	loopback bool     // the server listens on loopback only
	exact    []string // allowed hosts
	suffix   []string // allowed domains, each with its leading dot
}

// NewHostPolicy returns the policy of a server listening on addr
// (host:port; see IsLoopback) that also answers the hosts in allowed. An
// entry is a host name or IP address without scheme, port or path, or
// ".domain" for a domain and its subdomains; every malformed entry is
// reported.
func NewHostPolicy(addr string, allowed []string) (*HostPolicy, error) {
	p := &HostPolicy{loopback: IsLoopback(addr)}
	var errs []error
	for _, a := range allowed {
		e := strings.TrimSpace(a)
		if e == "" {
			continue
		}
		if !validAllowed(e) {
			errs = append(errs, fmt.Errorf("api: allowed host %q: want a host name or IP address without scheme, port or path, or .DOMAIN for a domain and its subdomains", a))
			continue
		}
		if h := normHost(e); strings.HasPrefix(h, ".") {
			p.suffix = append(p.suffix, h)
		} else {
			p.exact = append(p.exact, h)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// validAllowed reports whether e is an IP address (IPv6 with or without
// brackets), or a host name or .domain of letters, digits, '-' and '.'.
func validAllowed(e string) bool {
	if net.ParseIP(strings.Trim(e, "[]")) != nil {
		return true
	}
	name := strings.TrimSuffix(strings.TrimPrefix(e, "."), ".")
	if name == "" || strings.Contains(name, "..") {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// normHost returns host (a Host header or an allowed entry) without its
// port, brackets, surrounding space or trailing dot, in lower case.
func normHost(host string) string {
	host = strings.TrimSpace(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// Allows reports whether a request with this Host header is answered.
func (p *HostPolicy) Allows(host string) bool {
	h := normHost(host)
	if h != "" && IsLoopback(h) {
		return true
	}
	for _, e := range p.exact {
		if h == e {
			return true
		}
	}
	for _, s := range p.suffix {
		if h == s[1:] || strings.HasSuffix(h, s) {
			return true
		}
	}
	return !p.loopback && len(p.exact) == 0 && len(p.suffix) == 0
}

// Wrap returns next behind the policy: a request whose Host it does not
// allow gets 421 with a JSON error, whatever its path.
func (p *HostPolicy) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.Allows(r.Host) {
			writeError(w, p.refusal(r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (p *HostPolicy) refusal(host string) *apiError {
	if p.loopback {
		return errorf(http.StatusMisdirectedRequest, codeMisdirected,
			"request refused: this server listens on loopback only, and Host %q is not a loopback name or address, nor one of --allowed-hosts (a page whose name was pointed at this machine, DNS rebinding, sends such requests)", host)
	}
	return errorf(http.StatusMisdirectedRequest, codeMisdirected,
		"request refused: Host %q is not one of this server's --allowed-hosts, nor a loopback name or address", host)
}
