package valkey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/valkey-io/valkey-go"
)

// TestStaleConn: the failures of a connection the server closed are told
// apart, by type, from timeouts, refused dials, reply errors and the
// client's own closing.
func TestStaleConn(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	pipe := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"EOF", io.EOF, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"reset", reset, true},
		{"reset, wrapped", fmt.Errorf("x: %w", reset), true},
		{"broken pipe", pipe, true},
		{"closed connection", &net.OpError{Op: "read", Err: net.ErrClosed}, true},
		{"aborted", syscall.ECONNABORTED, true},
		{"refused dial", refused, false},
		{"read timeout", timeout, false},
		{"context deadline", context.DeadlineExceeded, false},
		{"canceled", context.Canceled, false},
		{"client closing", valkey.ErrClosing, false},
		{"plain", errors.New("boom"), false},
	} {
		if got := staleConn(c.err); got != c.want {
			t.Errorf("staleConn(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
