package valkey

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, addr, ca, want string
	}{
		{"no port", "cache.example", "", "address"},
		{"missing file", "cache.example:6379", filepath.Join(dir, "absent.pem"), "no such file"},
		{"no certificate", "cache.example:6379", notPEM, "no PEM certificate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := TLSConfig(c.addr, c.ca)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "valkey: tls: ") {
				t.Fatalf("TLSConfig(%q, %q) = %v, want an error mentioning %q", c.addr, c.ca, err, c.want)
			}
		})
	}
}

func TestTLSConfigServerName(t *testing.T) {
	for addr, want := range map[string]string{
		"master.adclick.abc123.use1.cache.amazonaws.com:6379": "master.adclick.abc123.use1.cache.amazonaws.com",
		"127.0.0.1:6380": "127.0.0.1",
		"[::1]:6380":     "::1",
	} {
		c, err := TLSConfig(addr, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.ServerName != want || c.RootCAs != nil || c.MinVersion < 0x0303 {
			t.Errorf("TLSConfig(%q): ServerName %q RootCAs %v MinVersion %x; want %q, system roots, ≥ TLS 1.2", addr, c.ServerName, c.RootCAs, c.MinVersion, want)
		}
	}
}
