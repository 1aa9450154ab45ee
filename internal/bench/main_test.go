package bench

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// childEnv makes the test binary stand in for the adclick executable of
// the variants (Options.Self): "bench --run-limit --trace FILE" runs
// Limit; any other command fails, as a pipeline that cannot start would.
const childEnv = "ADCLICK_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		args := os.Args[1:]
		if len(args) == 4 && args[0] == "bench" && args[1] == "--run-limit" && args[2] == "--trace" {
			if err := Limit(args[3], os.Stdout); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "no such command here: %q\n", args)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}
