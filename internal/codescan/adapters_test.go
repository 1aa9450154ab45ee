package codescan

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wiredByCaller are packages that reach no concrete source or store
// adapter: whoever builds them passes the source, the sinks, the
// checkpoint store, the lake and the lease in (cmd/adclick, the tests).
var wiredByCaller = []struct{ pkg, what string }{
	{"runtime", "goroutines, channels, Pebble state and the checkpoint coordinator around the subtask machines"},
}

// adapters are the concrete sources and stores, and the clients they are
// built on. Their contracts live apart: ingest/source, sink, sink/fence,
// ckptstore/ckpt, and recount's Store (recount itself holds the lake's
// writer, the recount and its finalizer, which the runtime runs).
var adapters = []string{
	"github.com/aws/...",
	"github.com/valkey-io/...",
	module + "/ingest/kinesis/...",
	module + "/sink/embedded/...",
	module + "/sink/dynamo/...",
	module + "/sink/valkey/...",
	module + "/lease/...",
	module + "/ckptstore", // Local and Remote; ckptstore/ckpt is the contract
	module + "/recount/s3lake/...",
}

// TestRuntimeImportsNoAdapter: adding a source or a store never touches
// the runtime, and the runtime never brings an AWS or Valkey client in.
func TestRuntimeImportsNoAdapter(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wiredByCaller {
		graph := goList(t, root, w.pkg)
		from := module + "/" + w.pkg
		if graph[from] == nil {
			t.Fatalf("%s is not in `go list` output: renamed or removed? update the table", w.pkg)
		}
		// Breadth first from the package, so each chain reported is a
		// shortest one.
		parent := map[string]string{from: ""}
		queue := []string{from}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if slices.ContainsFunc(adapters, func(a string) bool { return matches(a, p) }) {
				var chain []string
				for q := p; q != ""; q = parent[q] {
					chain = append(chain, short(q))
				}
				slices.Reverse(chain)
				t.Errorf("%s (%s) reaches the adapter %s: %s", w.pkg, w.what, p, strings.Join(chain, " → "))
				continue
			}
			info := graph[p]
			if info == nil || info.Standard {
				continue
			}
			for _, to := range info.Imports {
				if _, seen := parent[to]; !seen {
					parent[to] = p
					queue = append(queue, to)
				}
			}
		}
	}
}
