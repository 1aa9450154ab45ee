package runtime

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test ends every goroutine it started: the graph's subtasks, the
// source's readers, the sinks' clients.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
