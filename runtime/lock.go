package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockName is the file in DataDir that one job holds an exclusive lock on
// for as long as it runs.
const lockName = "LOCK"

// dataLock is the exclusive lock of one job on its data directory: a
// second job on the same directory is refused before it touches anything
// (it used to remove the first job's state before the store's own lock
// stopped it). The lock is the kernel's (flock): it goes with the process,
// so a killed job leaves no stale lock behind.
type dataLock struct{ f *os.File }

// lockDataDir takes the exclusive lock on dir, which must exist, and
// records the holder (pid, host, start time) in the lock file. A directory
// another process holds is refused with an error that names the holder.
func lockDataDir(dir string) (*dataLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runtime: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("runtime: data dir %s is in use by another job (%s): stop it first, or give this one another --data",
				dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("runtime: lock data dir %s: %w", dir, err)
	}
	host, _ := os.Hostname()
	info := "pid " + strconv.Itoa(os.Getpid()) + " on " + host + " since " + time.Now().UTC().Format(time.RFC3339)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info+"\n"), 0)
	}
	return &dataLock{f: f}, nil
}

// release gives the lock up.
func (l *dataLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// minFreeBytes is the free space a job needs under its data directory to
// start: below it a start is refused with a clear error instead of failing
// (or hanging) on the first state write.
const minFreeBytes = 64 << 20

// statfs is syscall.Statfs; a variable so a test can simulate a full disk.
var statfs = syscall.Statfs

// checkFreeSpace refuses a data directory on a (nearly) full file system.
func checkFreeSpace(dir string) error {
	var st syscall.Statfs_t
	if err := statfs(dir, &st); err != nil {
		return nil // not knowing is no reason to refuse
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	if free < minFreeBytes {
		return fmt.Errorf("runtime: data dir %s: only %d bytes free (at least %d needed): %w; free space there and start again",
			dir, free, minFreeBytes, syscall.ENOSPC)
	}
	return nil
}
