package valkey

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
)

// TLSConfig returns the TLS settings for a server at addr (host:port): TLS
// 1.2 or later, the server's certificate checked against caFile (PEM; ""
// = the system's roots, as for ElastiCache) and for the host name or IP
// address of addr.
func TLSConfig(addr, caFile string) (*tls.Config, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("valkey: tls: address %q: %w", addr, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("valkey: tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("valkey: tls: no PEM certificate in %s", caFile)
	}
	c.RootCAs = pool
	return c, nil
}
