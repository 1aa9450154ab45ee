package fleet

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// Layout is where a range of a job keeps what is its own, in the stores
// its workers share and on the worker that runs it. Every worker derives
// it from the range alone, so a range moved to another worker finds its
// predecessor's checkpoints, consumer and writes (docs/scale-out.md §7).
type Layout struct {
	// DataDir is the worker's local folder (run --data): each range has a
	// folder of its own in it.
	DataDir string
	// Checkpoints is the job's checkpoint location (s3://BUCKET/PREFIX):
	// each range's checkpoints are under a prefix of their own.
	Checkpoints string
	// Consumer is the job's EFO consumer name ("" when it polls): each
	// range reads through a consumer of its own, since two subscriptions
	// of one consumer to a shard take each other over.
	Consumer string
}

// DataDirOf returns range r's local folder: <DataDir>/kg<from>-<to>.
func (l Layout) DataDirOf(r windowing.KeyGroups) string { return filepath.Join(l.DataDir, r.String()) }

// CheckpointsOf returns range r's checkpoint location:
// <Checkpoints>/kg<from>-<to>.
func (l Layout) CheckpointsOf(r windowing.KeyGroups) string {
	return strings.TrimSuffix(l.Checkpoints, "/") + "/" + r.String()
}

// ConsumerOf returns range r's EFO consumer: <Consumer>-kg<from>-<to>, the
// job's own name for a range of every key group, "" when the job polls.
func (l Layout) ConsumerOf(r windowing.KeyGroups) string {
	if l.Consumer == "" || r.All() {
		return l.Consumer
	}
	return l.Consumer + "-" + r.String()
}

// ShareOf returns range r's part of a worker's budget total (the dedup
// memory): its share of the key groups, at least min, so that a worker
// holding every range stays within total.
func ShareOf(total int64, r windowing.KeyGroups, min int64) int64 {
	return max(total*int64(r.Len())/windowing.MaxParallelism, min)
}

// ScopedRows is a row store whose range views keep each range's tag index
// apart (sink/dynamo's Store).
type ScopedRows interface {
	sink.Rows
	ScopedRows(scope string) (sink.Rows, error)
}

// ScopedTotals is a running-total store whose range views keep each
// range's epoch sets apart (sink/valkey's Store).
type ScopedTotals interface {
	sink.Totals
	ScopedTotals(scope string) (sink.Totals, error)
}

// ScopedSinks returns range r's views of the shared stores. A nil store
// stays nil (an embedded store under the range's own folder needs none); a
// store that cannot keep ranges apart is refused.
func ScopedSinks(rows sink.Rows, totals sink.Totals, r windowing.KeyGroups) (sink.Rows, sink.Totals, error) {
	var err error
	if rows != nil {
		sr, ok := rows.(ScopedRows)
		if !ok {
			return nil, nil, fmt.Errorf("fleet: a key-group range needs a row store with range views (DynamoDB), not %T", rows)
		}
		if rows, err = sr.ScopedRows(r.Scope()); err != nil {
			return nil, nil, err
		}
	}
	if totals != nil {
		st, ok := totals.(ScopedTotals)
		if !ok {
			return nil, nil, fmt.Errorf("fleet: a key-group range needs a totals store with range views (Valkey), not %T", totals)
		}
		if totals, err = st.ScopedTotals(r.Scope()); err != nil {
			return nil, nil, err
		}
	}
	return rows, totals, nil
}
