package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// adminTokenFile is the file under --data holding the admin token that
// adclick run generated, read by the operator commands (as Jupyter keeps
// its server token where its clients find it).
const adminTokenFile = "admin-token"

// adminTokenPath returns the admin token file of a data directory.
func adminTokenPath(dataDir string) string { return filepath.Join(dataDir, adminTokenFile) }

// ensureAdminToken returns the admin token of the job's HTTP API: given if
// set (--admin-token); otherwise the token in <dataDir>/admin-token,
// which the first start creates with 32 random bytes and mode 0600 and
// later starts reuse. It logs where the token is, never the token. Call
// it once the data directory is locked (runtime.Open), so that two
// processes cannot race to create it.
func ensureAdminToken(dataDir, given string, log *slog.Logger) (string, error) {
	if given != "" {
		return given, nil
	}
	path := adminTokenPath(dataDir)
	tok, err := readAdminToken(path)
	switch {
	case err == nil:
		log.Info("operator endpoints need the admin token; it is in the file", "file", path)
		return tok, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok = base64.RawURLEncoding.EncodeToString(b)
	if err := writeFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	log.Info("generated the admin token of the operator endpoints (adclick savepoint, stop, sweep read it with --data)", "file", path)
	return tok, nil
}

// readAdminToken reads a token file. A file that others than its owner
// may read, or an empty one, is refused: the token opens the operator
// endpoints.
func readAdminToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return "", fmt.Errorf("admin token: %s has mode %04o, readable by others than its owner: chmod 600 it, or delete it to have a new token generated", path, m)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", fmt.Errorf("admin token: %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("admin token: %s does not hold one token: delete it to have a new one generated", path)
	}
	return tok, nil
}

// writeFileAtomic writes a new file: a temporary file in the same
// directory, synced, then renamed, so that no reader sees half of it.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
