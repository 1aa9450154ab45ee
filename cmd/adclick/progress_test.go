//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns both ends of a new pseudo-terminal. Linux always has
// them (CI included), so a missing one fails the test rather than skip it.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Fatalf("unlock pseudo-terminal: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		m.Close()
		t.Fatalf("pseudo-terminal number: %v", e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// TestProgressOnlyOnATerminal: gen draws its bar on a terminal's stderr,
// and writes nothing to a stderr that is not one (a log, a pipe).
func TestProgressOnlyOnATerminal(t *testing.T) {
	var out, errb bytes.Buffer
	if code := realMain([]string{"gen", "--clicks", "20000", "--start-ms", "1795946400000"}, &out, &errb); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errb.String())
	}
	if errb.Len() != 0 {
		t.Errorf("gen wrote %q to a stderr that is not a terminal, want nothing", errb.String())
	}

	master, tty := openPTY(t)
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			b.Write(buf[:n])
			if err != nil || strings.Contains(b.String(), "clicks") {
				got <- b.String()
				io.Copy(io.Discard, master)
				return
			}
		}
	}()
	out.Reset()
	if code := realMain([]string{"gen", "--clicks", "200000", "--start-ms", "1795946400000"}, &out, tty); code != 0 {
		t.Fatalf("gen on a terminal: exit %d", code)
	}
	select {
	case s := <-got:
		if !strings.Contains(s, "gen") || !strings.Contains(s, "clicks") {
			t.Errorf("the terminal got %q, want a bar describing gen's clicks", s)
		}
	case <-time.After(10 * time.Second):
		t.Error("gen drew no bar on a terminal")
	}
	if n := strings.Count(out.String(), "\n"); n != 200000 {
		t.Errorf("gen wrote %d lines with a bar, want 200000", n)
	}
}

// TestProgressNilIsQuiet: the helpers do nothing off a terminal.
func TestProgressNilIsQuiet(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, 10, "x", "rows")
	if p != nil {
		t.Fatal("newProgress on a buffer: got a bar, want nil")
	}
	p.add(1)
	p.set(5)
	p.describe("y")
	p.finish()
	called := false
	run := withSpinner("sweep", func(_ context.Context, _ []string, _, _ io.Writer) error {
		called = true
		return nil
	})
	if err := run(t.Context(), nil, &b, &b); err != nil || !called || b.Len() != 0 {
		t.Errorf("withSpinner off a terminal: err %v, called %v, wrote %q", err, called, b.String())
	}
}
