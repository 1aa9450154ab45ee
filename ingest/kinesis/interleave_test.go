package kinesis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest/kinesis"
)

// shardIDs are the fake's ids of the first shards of a new stream.
var shardIDs = []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}

// putBacklog puts per[k] plain records into shard k of the stream, keyed
// "s<k>" and numbered from 0.
func putBacklog(t *testing.T, api kinesis.API, per ...int) {
	t.Helper()
	hk, err := kinesis.ShardHashKeys(context.Background(), api, stream)
	if err != nil {
		t.Fatal(err)
	}
	var recs []kinesis.PutRecord
	for k, n := range per {
		for i := range n {
			recs = append(recs, kinesis.PutRecord{Data: payload(fmt.Sprint("s", k), i), PartitionKey: "x", ExplicitHashKey: hk[k]})
		}
	}
	if err := kinesis.Put(context.Background(), api, stream, recs); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

// checkInterleaved checks the order in which a backlog of per records in
// each shard was read (recs holds all of them): each shard's records in
// the order put; every shard's first record among the first len(per)
// records; and no two consecutive records of one shard while another
// shard still had records to come (the shards take turns, one record
// each).
func checkInterleaved(t *testing.T, recs []kinesis.Record, per int, shards int) {
	t.Helper()
	if len(recs) != per*shards {
		t.Fatalf("read %d records, want %d", len(recs), per*shards)
	}
	left := map[string]int{}
	for _, r := range recs {
		left[r.Shard]++
	}
	if len(left) != shards {
		t.Fatalf("records from %d shards, want %d", len(left), shards)
	}
	first := map[string]int{}
	next := map[string]int{}
	run, longest, longestAt := 0, 0, 0
	for i, r := range recs {
		var k string
		var n int
		if _, err := fmt.Sscanf(string(r.Data), `{"key":%q,"n":%d}`, &k, &n); err != nil {
			t.Fatalf("payload %q: %v", r.Data, err)
		}
		if n != next[r.Shard] {
			t.Fatalf("shard %s: record %d read at %d, want record %d", r.Shard, n, i, next[r.Shard])
		}
		next[r.Shard]++
		if _, ok := first[r.Shard]; !ok {
			first[r.Shard] = i
		}
		others := len(recs) - i - left[r.Shard] // records of other shards still to come
		left[r.Shard]--
		if i > 0 && recs[i-1].Shard == r.Shard {
			run++
		} else {
			run = 1
		}
		if others > 0 && run > longest {
			longest, longestAt = run, i
		}
	}
	for id, i := range first {
		if i >= shards {
			t.Errorf("first record of shard %s read at %d, want < %d (first records at %v)", id, i, shards, first)
		}
	}
	if longest > 1 {
		t.Errorf("longest run of one shard while others had records to come: got %d (ending at %d), want 1", longest, longestAt)
	}
}

// readAll reads exactly n user records with the reader's checks, calling
// idle whenever Next has nothing to hand out.
func readAll(t *testing.T, r *reader, n int, idle func()) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(r.recs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d records within 30s, want %d", len(r.recs), n)
		}
		rec, ok, err := r.src.Next(context.Background(), 10*time.Millisecond)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if ok {
			r.take(rec)
		} else if idle != nil {
			idle()
		}
	}
}

// TestBacklogInterleaved reads a backlog already queued for four shards:
// the shards take turns.
func TestBacklogInterleaved(t *testing.T) {
	const per = 3000
	f := newStream(t, 4)
	putBacklog(t, f, per, per, per, per)
	src := open(t, f, kinesis.Options{})
	// Each shard's whole backlog is fetched by its first call (Limit
	// 10,000) and queued together with the reply's lag.
	waitFor(t, func() bool { return len(src.Lag()) == 4 }, "every shard polled")
	r := newReader(t, src)
	readAll(t, r, 4*per, nil)
	checkInterleaved(t, r.recs, per, 4)
}

// TestBacklogInterleavedStaggeredFetches is the cold start of a job whose
// shards' first GetRecords calls return one after another (kinesalite
// serves them in turn; a real stream may throttle some): a shard's first
// call may only complete once the previous shard's backlog is queued and
// Next has nothing more to hand out. Without the start hold, every shard's
// backlog would be handed out whole before the next shard's first record,
// and a job watermark (the minimum over shards) could not form while the
// backlog is read.
func TestBacklogInterleavedStaggeredFetches(t *testing.T) {
	const per = 3000
	f := newStream(t, 4)
	putBacklog(t, f, per, per, per, per)
	g := newGated(f, shardIDs[1:]...)
	src := open(t, g, kinesis.Options{StartHold: time.Minute})
	r := newReader(t, src)
	next := 1
	readAll(t, r, 4*per, func() {
		if next == len(shardIDs) {
			return
		}
		if _, polled := src.Lag()[shardIDs[next-1]]; polled {
			g.open(shardIDs[next])
			next++
		}
	})
	checkInterleaved(t, r.recs, per, 4)
	// Every shard_added event came before any record.
	for i, rec := range r.order[:4] {
		if rec.Event != kinesis.EventShardAdded {
			t.Fatalf("item %d: got %+v, want the 4 shard_added events first", i, rec)
		}
	}
}

// TestStartHoldBounded checks that the start hold ends after StartHold when
// a shard never fetches, and that a negative StartHold holds nothing.
func TestStartHoldBounded(t *testing.T) {
	t.Run("bounded", func(t *testing.T) {
		f := newStream(t, 2)
		putBacklog(t, f, 50, 50)
		g := newGated(f, shardIDs[1])
		const hold = 300 * time.Millisecond
		start := time.Now()
		src := open(t, g, kinesis.Options{StartHold: hold})
		r := newReader(t, src)
		// One long wait: the end of the hold wakes Next.
		for len(r.recs) == 0 {
			rec, ok, err := src.Next(context.Background(), 10*time.Second)
			if err != nil || !ok {
				t.Fatalf("Next(10s): got ok %v err %v, want shard 0's first record", ok, err)
			}
			r.take(rec)
		}
		took := time.Since(start)
		if took < hold {
			t.Fatalf("first record after %v, want ≥ %v (the start hold)", took, hold)
		}
		if took > hold+3*time.Second {
			t.Fatalf("first record after %v, want soon after the %v hold", took, hold)
		}
		if r.recs[0].Shard != shardIDs[0] {
			t.Fatalf("first record from %s, want %s", r.recs[0].Shard, shardIDs[0])
		}
		r.read(50, 10*time.Second)
		g.open(shardIDs[1])
		r.read(100, 10*time.Second)
		checkExactlyOnce(t, r.recs, wantPayloads(backlogRecords(50, 50)))
	})
	t.Run("disabled", func(t *testing.T) {
		f := newStream(t, 2)
		putBacklog(t, f, 50, 50)
		g := newGated(f, shardIDs[1])
		src := open(t, g, kinesis.Options{StartHold: -1})
		r := newReader(t, src)
		r.read(50, 10*time.Second)
		if _, polled := src.Lag()[shardIDs[1]]; polled {
			t.Fatalf("shard %s polled through a closed gate", shardIDs[1])
		}
		g.open(shardIDs[1])
		r.read(100, 10*time.Second)
		checkExactlyOnce(t, r.recs, wantPayloads(backlogRecords(50, 50)))
	})
}

// TestStartHoldEmptyShard checks that a shard with nothing to read does not
// hold the others: its first call finds it caught up.
func TestStartHoldEmptyShard(t *testing.T) {
	f := newStream(t, 2)
	putBacklog(t, f, 100, 0)
	src := open(t, f, kinesis.Options{StartHold: time.Minute})
	r := newReader(t, src)
	r.read(100, 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(backlogRecords(100, 0)))
}

// backlogRecords returns the records putBacklog puts.
func backlogRecords(per ...int) []kinesis.PutRecord {
	var recs []kinesis.PutRecord
	for k, n := range per {
		for i := range n {
			recs = append(recs, kinesis.PutRecord{Data: payload(fmt.Sprint("s", k), i)})
		}
	}
	return recs
}

// gatedAPI holds the GetRecords calls of some shards until the test opens
// their gate (or the call's context ends). It finds a call's shard by
// remembering which shard each iterator it passed on belongs to.
type gatedAPI struct {
	kinesis.API

	mu    sync.Mutex
	gates map[string]chan struct{} // shard id → closed when its calls may go on
	iters map[string]string        // shard iterator → shard id
}

func newGated(api kinesis.API, closed ...string) *gatedAPI {
	g := &gatedAPI{API: api, gates: map[string]chan struct{}{}, iters: map[string]string{}}
	for _, id := range closed {
		g.gates[id] = make(chan struct{})
	}
	return g
}

// open lets the GetRecords calls of shard id go on.
func (g *gatedAPI) open(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.gates[id]; ok {
		close(c)
		delete(g.gates, id)
	}
}

func (g *gatedAPI) GetShardIterator(ctx context.Context, in *sdk.GetShardIteratorInput, optFns ...func(*sdk.Options)) (*sdk.GetShardIteratorOutput, error) {
	out, err := g.API.GetShardIterator(ctx, in, optFns...)
	if err == nil && out.ShardIterator != nil {
		g.mu.Lock()
		g.iters[*out.ShardIterator] = aws.ToString(in.ShardId)
		g.mu.Unlock()
	}
	return out, err
}

func (g *gatedAPI) GetRecords(ctx context.Context, in *sdk.GetRecordsInput, optFns ...func(*sdk.Options)) (*sdk.GetRecordsOutput, error) {
	g.mu.Lock()
	id := g.iters[aws.ToString(in.ShardIterator)]
	gate := g.gates[id]
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out, err := g.API.GetRecords(ctx, in, optFns...)
	if err == nil && out.NextShardIterator != nil {
		g.mu.Lock()
		g.iters[*out.NextShardIterator] = id
		g.mu.Unlock()
	}
	return out, err
}
