package kinesis

import (
	"context"
	"maps"
	"time"

	"github.com/adclick/adclick/ingest/source"
)

// Opener returns the Open of a Kinesis source for the job: o's reader
// options, with Positions, Registerer and Logger taken from the start. Its
// positions cover exactly the records routed, per shard
// ("<sequence>/<sub-sequence>", or PositionClosed).
func Opener(api API, o Options) source.Open {
	return func(ctx context.Context, at source.Start) (source.Source, error) {
		o := o
		o.Positions = maps.Clone(at.Positions)
		o.Registerer = at.Registerer
		o.Logger = at.Logger
		if o.StartAt == StartLatest && at.StartMs > 0 {
			// "latest" as of the lineage's first start, not this open's:
			// a restart before the first checkpoint, or of a shard that
			// had no record by then, skips nothing that arrived since.
			o.StartAt, o.StartTimestamp = StartAtTimestamp, time.UnixMilli(at.StartMs)
		}
		src, err := Open(ctx, api, o)
		if err != nil {
			return nil, err
		}
		pos := maps.Clone(at.Positions)
		if pos == nil {
			pos = map[string]string{}
		}
		return &jobSource{src: src, pos: pos}, nil
	}
}

type jobSource struct {
	src  *Source
	pos  map[string]string
	last Record
}

var (
	_ source.CaughtUpper = (*jobSource)(nil)
	_ source.Lagger      = (*jobSource)(nil)
)

func (k *jobSource) Next(ctx context.Context, wait time.Duration) (source.Record, bool, error) {
	r, ok, err := k.src.Next(ctx, wait)
	if err != nil || !ok {
		if ctx.Err() != nil {
			return source.Record{}, false, nil
		}
		return source.Record{}, false, err
	}
	k.last = r
	out := source.Record{Line: r.Data, ArrivalMs: r.ArrivalMs, Shard: r.Shard, Seq: FormatPosition(r.Seq, r.Sub), Bad: r.Bad}
	switch r.Event {
	case EventShardAdded:
		out.Event = source.ShardAdded
	case EventShardClosed:
		out.Event = source.ShardClosed
	case EventShardReader:
		out.Event = source.ShardReader
		out.Reader = r.Reader
	}
	return out, true, nil
}

func (k *jobSource) Routed() {
	switch k.last.Event {
	case EventShardClosed:
		k.pos[k.last.Shard] = PositionClosed
	case "":
		k.pos[k.last.Shard] = FormatPosition(k.last.Seq, k.last.Sub)
	}
}

func (k *jobSource) Positions() map[string]string { return maps.Clone(k.pos) }
func (k *jobSource) Virtual() bool                { return false }
func (k *jobSource) Close() error                 { k.src.Close(); return nil }
func (k *jobSource) CaughtUp() bool               { return k.src.CaughtUp() }
func (k *jobSource) Lag() map[string]int64        { return k.src.Lag() }
