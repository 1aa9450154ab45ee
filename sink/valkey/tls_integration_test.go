//go:build integration

package valkey

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
)

// tlsRedis starts a redis-server of the test's own that speaks only TLS on
// a loopback port, with a self-signed certificate for 127.0.0.1, and
// returns its address and the certificate's PEM file.
func tlsRedis(t *testing.T) (addr, caFile string) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server, or run scripts/test.sh): %v", err)
	}
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "adclick test valkey"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr = "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", caFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
		"--save", "", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 200 * time.Millisecond}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err == nil {
			c.Close()
			return addr, caFile
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS redis-server on %s not reachable within 10 s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTLS writes and reads running totals over TLS with the server's CA,
// and checks that the same server is refused without it (the system's
// roots do not know a self-signed certificate).
func TestTLS(t *testing.T) {
	addr, caFile := tlsRedis(t)
	ctx := context.Background()
	open := func(ca string) *Store {
		tc, err := TLSConfig(addr, ca)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, Options{Addr: addr, Prefix: testPrefix(t), TLS: tc, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	want := sink.Total{Ad: "ad_tls", StartMs: 1_795_946_400_000, Valid: 7, SpendMicros: 700, Epoch: 3}
	s := open(caFile)
	if err := s.SetTotals(ctx, []sink.Total{want}); err != nil {
		t.Fatalf("SetTotals over TLS: %v", err)
	}
	got, ok, err := s.GetTotal(ctx, want.Key())
	if err != nil || !ok || got.Valid != want.Valid || got.SpendMicros != want.SpendMicros {
		t.Fatalf("GetTotal over TLS = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	untrusted := open("")
	if err := untrusted.SetTotals(ctx, []sink.Total{want}); err == nil {
		t.Fatal("SetTotals to a server whose certificate the system's roots do not know succeeded, want a refusal")
	}
}
