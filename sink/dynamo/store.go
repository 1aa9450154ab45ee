package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/sink"
)

// API is the part of the DynamoDB client a Store uses. *dynamodb.Client
// implements it; tests supply fakes that inject faults.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Store is the ad_metrics table on DynamoDB, a sink.Rows. It is safe for
// concurrent use. A Store may be a view with an index scope (Scoped).
type Store struct {
	api   API
	o     Options
	m     *metrics
	sem   chan struct{} // one token per request in flight
	ex    map[sink.Writer]*writerExprs
	scope string // the index scope (sink.ValidateScope); "" unscoped
}

var _ sink.FencedRows = (*Store)(nil)

// writerExprs are the expressions of one tagged writer, built once.
type writerExprs struct {
	names         map[string]string // for Put: #v #s #c #ix #g #jg #wf #bs
	update        string            // SET of all five attributes, job_gen, bucket_shard and wf
	updateNoWf    string            // the same SET, and REMOVE of wf: a write with fence 0
	namesTTL      map[string]string // names, and #ea
	updateTTL     string            // update, and SET of expires_at
	updateTTLNoWf string            // updateNoWf, and SET of expires_at
	cond          string            // the token's condition (job_gen, wf)
	condClosed    string            // cond AND closed-row condition
	removeNames   map[string]string // #v #s #c #ix #g
	removeUpdate  string            // REMOVE of the five attributes
	removeCond    string            // #c = :c
	deleteNames   map[string]string // #c and every other writer's attributes
	deleteCond    string            // #c = :c AND no other writer's attributes

	// RemoveFenced and DeleteFenced (see Store.RemoveFenced).
	fenceNames      map[string]string // removeNames, #jg and #wf
	fenceRaise      string            // removeUpdate, and SET of wf
	fenceRaiseCond  string            // #c = :c, job_gen = :g and wf <= :f
	fenceOtherNames map[string]string // removeNames and #jg
	fenceOtherCond  string            // #c = :c and job_gen <> :g
	fenceZeroCond   string            // #c = :c and (wf <= :f or job_gen <> :g), for fence 0
	fenceDelNames   map[string]string // deleteNames, #jg and #wf
	fenceDelCond    string            // deleteCond and (wf <= :f or job_gen <> :g)
}

// The fence conditions (sink.Put, sink.FencedRows).
const (
	// condToken is the token's condition of a Put: (job_gen, wf) <=
	// (:g, :f), an item without wf counting as fence 0.
	condToken = "(attribute_not_exists(#jg) OR #jg < :g OR (#jg = :g AND (attribute_not_exists(#wf) OR #wf <= :f)))"
	// condFence is the fence condition of RemoveFenced and DeleteFenced.
	condFence = "(attribute_not_exists(#wf) OR #wf <= :f OR #jg <> :g)"
)

func buildExprs(w sink.Writer) *writerExprs {
	a := attrsOf(w)
	set := "SET #v = :v, #s = :s, #c = :c, #ix = :ix, #g = :g, #jg = :g, #bs = :bs"
	e := &writerExprs{
		names:         map[string]string{"#v": a.valid, "#s": a.spend, "#c": a.ckpt, "#ix": a.ix, "#g": a.gen, "#jg": attrJobGen, "#wf": attrFence, "#bs": BucketShardAttribute},
		update:        set + ", #wf = :f",
		updateNoWf:    set + " REMOVE #wf",
		updateTTL:     set + ", #ea = :ea, #wf = :f",
		updateTTLNoWf: set + ", #ea = :ea REMOVE #wf",
		cond:          condToken,
		removeNames:   map[string]string{"#v": a.valid, "#s": a.spend, "#c": a.ckpt, "#ix": a.ix, "#g": a.gen},
		removeUpdate:  "REMOVE #v, #s, #c, #ix, #g",
		removeCond:    "#c = :c",
		deleteNames:   map[string]string{"#c": a.ckpt},
	}
	e.condClosed = e.cond + " AND (attribute_not_exists(#c) OR #c >= :rc)"
	e.namesTTL = map[string]string{"#ea": TTLAttribute}
	for k, v := range e.names {
		e.namesTTL[k] = v
	}
	other := sink.Late
	if w == sink.Late {
		other = sink.Fast
	}
	others := append(attrsOf(other).all(), attrFinalValid, attrFinalSpend, attrFinalGen, attrFinalAt)
	conds := []string{"#c = :c"}
	for i, name := range others {
		ph := fmt.Sprintf("#o%d", i)
		e.deleteNames[ph] = name
		conds = append(conds, "attribute_not_exists("+ph+")")
	}
	e.deleteCond = strings.Join(conds, " AND ")

	e.fenceNames = maps.Clone(e.removeNames)
	e.fenceNames["#jg"], e.fenceNames["#wf"] = attrJobGen, attrFence
	e.fenceOtherNames = maps.Clone(e.removeNames)
	e.fenceOtherNames["#jg"] = attrJobGen
	e.fenceDelNames = maps.Clone(e.deleteNames)
	e.fenceDelNames["#jg"], e.fenceDelNames["#wf"] = attrJobGen, attrFence
	e.fenceRaise = e.removeUpdate + " SET #wf = :f"
	e.fenceRaiseCond = "#c = :c AND #jg = :g AND (attribute_not_exists(#wf) OR #wf <= :f)"
	e.fenceOtherCond = "#c = :c AND (attribute_not_exists(#jg) OR #jg <> :g)"
	e.fenceZeroCond = "#c = :c AND " + condFence
	e.fenceDelCond = e.deleteCond + " AND " + condFence
	return e
}

// Expressions of PutFinal. The recount sets expires_at only on a row that
// has none (a row only the recount writes): the stream's writes, under the
// job's retention, own it, and a recount run with another retention must
// not shorten the life of a billing row. bucket_shard is set on every
// write, as Put does: the recount may create the row.
var (
	finalNames     = map[string]string{"#v": attrFinalValid, "#s": attrFinalSpend, "#g": attrFinalGen, "#a": attrFinalAt, "#bs": BucketShardAttribute}
	finalUpdate    = "SET #v = :v, #s = :s, #g = :g, #a = :a, #bs = :bs"
	finalNamesTTL  = map[string]string{"#v": attrFinalValid, "#s": attrFinalSpend, "#g": attrFinalGen, "#a": attrFinalAt, "#bs": BucketShardAttribute, "#ea": TTLAttribute}
	finalUpdateTTL = finalUpdate + ", #ea = if_not_exists(#ea, :ea)"
	finalCond      = "attribute_not_exists(#g) OR #g <= :g"
)

// New returns a Store on the table o.Table through client. It fills o's
// defaults, validates it and registers the metrics; it does not touch the
// table (see CreateTable). The client should not retry by itself (see
// NewClient): the Store retries throttling, 5xx and transport errors.
func New(client API, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("dynamo: nil client")
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer, o.Table)
	if err != nil {
		return nil, err
	}
	ex := map[sink.Writer]*writerExprs{}
	for _, w := range sink.TaggedWriters {
		ex[w] = buildExprs(w)
	}
	return &Store{api: client, o: o, m: m, sem: make(chan struct{}, o.MaxInFlight), ex: ex}, nil
}

// Table returns the table name.
func (s *Store) Table() string { return s.o.Table }

// Scoped returns a view of the store with the index scope scope (see
// sink.ValidateScope): its Put writes <w>_ix = sink.IndexKeyIn(scope, ...)
// and its QueryIndex(w, ix) queries sink.ScopedIndexKey(scope, ix), so a
// range pipeline's flush finds only its own writes. Everything else (the
// table, the client, Options.MaxInFlight, the metrics) is shared with s.
// Scope "" gives the unscoped layout; the scope of a view does not nest:
// s.Scoped(a).Scoped(b) is s.Scoped(b).
func (s *Store) Scoped(scope string) (*Store, error) {
	if err := sink.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("dynamo: %w", err)
	}
	v := *s
	v.scope = scope
	return &v, nil
}

// ScopedRows is Scoped as a sink.Rows (a fleet's range views).
func (s *Store) ScopedRows(scope string) (sink.Rows, error) {
	v, err := s.Scoped(scope)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Scope returns the store's index scope, "" when unscoped.
func (s *Store) Scope() string { return s.scope }

func (s *Store) exprs(op string, w sink.Writer) (*writerExprs, error) {
	e, ok := s.ex[w]
	if !ok {
		return nil, fmt.Errorf("dynamo: %s: writer %v is not a tagged writer (fast or late)", op, w)
	}
	return e, nil
}

type writeKey struct {
	sink.Key
	w sink.Writer
}

// Put applies tagged writes as one conditional UpdateItem each, at most
// Options.MaxInFlight at a time. Callers pass puts in order: of several
// writes to the same (key, writer) in one call only the last is sent, and
// the others count as neither applied nor refused. Writes to different
// items, or to different writers of one item, run in no particular order.
// On a failure that remains after retries Put stops starting new writes and
// returns the first error; writes already sent may have been applied, which
// is harmless because every write is an absolute, tagged SET.
func (s *Store) Put(ctx context.Context, puts []sink.Put) (int, error) {
	for i := range puts {
		if _, err := s.exprs("put", puts[i].Writer); err != nil {
			return 0, err
		}
		if err := sink.ValidFence(puts[i].Fence); err != nil {
			return 0, fmt.Errorf("dynamo: put: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("dynamo: put: %w", err)
	}
	last := make(map[writeKey]int, len(puts))
	for i := range puts {
		last[writeKey{puts[i].Key, puts[i].Writer}] = i
	}
	todo := make([]int, 0, len(last))
	for i := range puts {
		if last[writeKey{puts[i].Key, puts[i].Writer}] == i {
			todo = append(todo, i)
		}
	}
	refused, err := s.runAll(ctx, "put", len(todo), func(j int) *dynamodb.UpdateItemInput {
		return s.putInput(&puts[todo[j]])
	})
	if err != nil {
		return refused, fmt.Errorf("dynamo: put: %w", err)
	}
	return refused, nil
}

func (s *Store) putInput(p *sink.Put) *dynamodb.UpdateItemInput {
	e := s.ex[p.Writer]
	vals := map[string]types.AttributeValue{
		":v":  num(p.Valid),
		":s":  num(p.SpendMicros),
		":c":  num(p.Epoch),
		":ix": str(sink.IndexKeyIn(s.scope, p.Epoch, p.Key)),
		":g":  num(p.Gen),
		":f":  num(p.Fence),
		":bs": str(BucketShardKey(p.Bucket, p.Entity)),
	}
	cond := e.cond
	if p.ClosedRow {
		cond = e.condClosed
		vals[":rc"] = num(p.RestoredCkpt)
	}
	// A write with fence 0 removes wf: the item is then as before fences,
	// and an older version's wf does not outlive its job_gen.
	update, names := e.update, e.names
	if p.Fence == 0 {
		update = e.updateNoWf
	}
	// An absolute SET of the row's expiry, the same value on every write
	// of the row; Forever leaves an earlier expiry as it is.
	if sec, ok := s.o.Retention.ExpiresAt(p.Bucket); ok {
		update, names = e.updateTTL, e.namesTTL
		if p.Fence == 0 {
			update = e.updateTTLNoWf
		}
		vals[":ea"] = num(sec)
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.o.Table),
		Key:                       keyOf(p.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
	}
}

// PutFinal applies recount writes under the final_gen condition, as Put
// does (concurrently, the last write of a key in the call wins). It does not
// touch job_gen: the recount's generation is not the stream's.
func (s *Store) PutFinal(ctx context.Context, puts []sink.FinalPut) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("dynamo: put final: %w", err)
	}
	last := make(map[sink.Key]int, len(puts))
	for i := range puts {
		last[puts[i].Key] = i
	}
	todo := make([]int, 0, len(last))
	for i := range puts {
		if last[puts[i].Key] == i {
			todo = append(todo, i)
		}
	}
	refused, err := s.runAll(ctx, "put_final", len(todo), func(j int) *dynamodb.UpdateItemInput {
		p := &puts[todo[j]]
		update, names := finalUpdate, finalNames
		vals := map[string]types.AttributeValue{
			":v": num(p.Valid), ":s": num(p.SpendMicros), ":g": num(p.Gen), ":a": num(p.AtMs),
			":bs": str(BucketShardKey(p.Bucket, p.Entity)),
		}
		if sec, ok := s.o.Retention.ExpiresAt(p.Bucket); ok {
			update, names = finalUpdateTTL, finalNamesTTL
			vals[":ea"] = num(sec)
		}
		return &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.o.Table),
			Key:                       keyOf(p.Key),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String(finalCond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}
	})
	if err != nil {
		return refused, fmt.Errorf("dynamo: put final: %w", err)
	}
	return refused, nil
}

// runAll sends n conditional updates from min(n, MaxInFlight) goroutines and
// returns how many were refused and the first error.
func (s *Store) runAll(ctx context.Context, op string, n int, input func(int) *dynamodb.UpdateItemInput) (int, error) {
	if n == 0 {
		return 0, nil
	}
	var (
		next     atomic.Int64
		refused  atomic.Int64
		stop     atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	workers := min(n, s.o.MaxInFlight)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				in := input(i)
				err := s.do(ctx, op, func(ctx context.Context) error {
					_, err := s.api.UpdateItem(ctx, in)
					return err
				})
				switch {
				case err == nil:
					s.m.writes.WithLabelValues(op).Inc()
				case errors.Is(err, errCondition):
					s.m.refused.WithLabelValues(op).Inc()
					refused.Add(1)
				default:
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(refused.Load()), firstErr
}

// Get reads the item at k with a strongly consistent read.
func (s *Store) Get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	av, err := s.getItem(ctx, "get", k)
	if err != nil {
		return sink.Item{}, false, fmt.Errorf("dynamo: get item: %w", err)
	}
	if len(av) == 0 {
		return sink.Item{}, false, nil
	}
	it, err := decodeItem(av)
	if err != nil {
		return sink.Item{}, false, fmt.Errorf("dynamo: get item %v: %w", k, err)
	}
	return it, true, nil
}

// getItem reads the item at k with a strongly consistent read (nil if
// there is none), counted as op.
func (s *Store) getItem(ctx context.Context, op string, k sink.Key) (map[string]types.AttributeValue, error) {
	var out *dynamodb.GetItemOutput
	err := s.do(ctx, op, func(ctx context.Context) error {
		var err error
		out, err = s.api.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(s.o.Table),
			Key:            keyOf(k),
			ConsistentRead: aws.Bool(true),
		})
		return err
	})
	if err != nil || out == nil {
		return nil, err
	}
	return out.Item, nil
}

// QueryIndex queries w's tag index (the GSI fast_ix or late_ix) for ix, in
// the store's scope (sink.ScopedIndexKey), and calls fn for every item,
// page after page. Index reads are eventually consistent. fn runs while no
// request of this call is in flight, so it may call the Store.
func (s *Store) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	if _, err := s.exprs("query index", w); err != nil {
		return err
	}
	ix = sink.ScopedIndexKey(s.scope, ix)
	var start map[string]types.AttributeValue
	for {
		var out *dynamodb.QueryOutput
		err := s.do(ctx, "query", func(ctx context.Context) error {
			var err error
			out, err = s.api.Query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(s.o.Table),
				IndexName:                 aws.String(indexName(w)),
				KeyConditionExpression:    aws.String("#ix = :ix"),
				ExpressionAttributeNames:  map[string]string{"#ix": indexName(w)},
				ExpressionAttributeValues: map[string]types.AttributeValue{":ix": str(ix)},
				ExclusiveStartKey:         start,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("dynamo: query index %s %q: %w", indexName(w), ix, err)
		}
		if err := s.each(out.Items, fn); err != nil {
			return err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}

// QueryBucket reads bucket's items after the entity after, in entity
// order, until limit items (limit < 1: all), from the bucket index
// (BucketIndex): one query per shard, "<bucket>#0" to
// "<bucket>#<BucketShards-1>", each in entity order, merged.
//
// A shard's first query asks for about its share of limit, with a margin
// (shardLimit); a shard whose items run out while the merge still needs
// it is queried again, for twice as many, never for more than are still
// wanted. So a page reads its own items and a few more per shard, not the
// table and not BucketShards × limit. The queries of one round run
// concurrently (bounded by Options.MaxInFlight). Index reads are eventually
// consistent. fn runs while no request of this call is in flight.
func (s *Store) QueryBucket(ctx context.Context, bucket, after string, limit int, fn func(sink.Item) error) error {
	cond := "#bs = :bs"
	names := map[string]string{"#bs": BucketShardAttribute}
	if after != "" {
		// A key condition cannot compare with an empty string.
		cond += " AND #e > :a"
		names["#e"] = attrEntity
	}
	shards := make([]bucketShardReader, BucketShards)
	for i := range shards {
		shards[i].key = bucketShardKeyOf(bucket, i)
		if limit > 0 {
			shards[i].limit = shardLimit(limit)
		}
	}
	query := func(ctx context.Context, r *bucketShardReader, want int) error {
		vals := map[string]types.AttributeValue{":bs": str(r.key)}
		if after != "" {
			vals[":a"] = str(after)
		}
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(s.o.Table),
			IndexName:                 aws.String(BucketIndex),
			KeyConditionExpression:    aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
			ExclusiveStartKey:         r.start,
		}
		if limit > 0 {
			in.Limit = aws.Int32(int32(min(r.limit, want, 1<<30)))
			r.limit = min(2*r.limit, 1<<30)
		}
		var out *dynamodb.QueryOutput
		err := s.do(ctx, "query_bucket", func(ctx context.Context) error {
			var err error
			out, err = s.api.Query(ctx, in)
			return err
		})
		if err != nil {
			return fmt.Errorf("dynamo: query index %s %q: %w", BucketIndex, r.key, err)
		}
		r.items = r.items[:0]
		for _, av := range out.Items {
			it, err := decodeItem(av)
			if err != nil {
				return fmt.Errorf("dynamo: query index %s %q: %w", BucketIndex, r.key, err)
			}
			r.items = append(r.items, it)
		}
		r.start = out.LastEvaluatedKey
		r.done = len(r.start) == 0
		r.fetched = true
		return nil
	}
	n := 0
	for {
		// Query, concurrently, every shard whose items have run out and
		// that has more.
		want := limit - n
		var (
			wg       sync.WaitGroup
			errOnce  sync.Once
			firstErr error
		)
		qctx, cancel := context.WithCancel(ctx)
		for i := range shards {
			r := &shards[i]
			if len(r.items) > 0 || (r.fetched && r.done) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := query(qctx, r, want); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
				}
			}()
		}
		wg.Wait()
		cancel()
		if firstErr != nil {
			return firstErr
		}
		// Merge until a shard that may have more runs out.
		for {
			if limit > 0 && n >= limit {
				return nil
			}
			best, refill := -1, false
			for i := range shards {
				r := &shards[i]
				if len(r.items) == 0 {
					if !r.done {
						refill = true
						break
					}
					continue
				}
				if best < 0 || r.items[0].Entity < shards[best].items[0].Entity {
					best = i
				}
			}
			if refill {
				break
			}
			if best < 0 {
				return nil
			}
			it := shards[best].items[0]
			shards[best].items = shards[best].items[1:]
			if err := fn(it); err != nil {
				return err
			}
			n++
		}
	}
}

// bucketShardReader is QueryBucket's reader of one shard of a bucket.
type bucketShardReader struct {
	key     string                          // "<bucket>#<n>"
	items   []sink.Item                     // read, not yet merged
	start   map[string]types.AttributeValue // the next query's ExclusiveStartKey
	limit   int                             // the next query's Limit, before the cap of what is still wanted
	fetched bool                            // queried at least once
	done    bool                            // fetched and no LastEvaluatedKey: no more items
}

// shardLimit is the Limit of a shard's first query for a page of limit
// items: the shard's share of the page (its items are spread over the
// shards by a hash, independent of the entity order) plus about two
// standard deviations and one, so that most pages take one round of
// queries.
func shardLimit(limit int) int {
	share := (limit + BucketShards - 1) / BucketShards
	return min(limit, share+2*int(math.Ceil(math.Sqrt(float64(share))))+1)
}

// Scan reads the whole table (strongly consistent), page after page, and
// calls fn for every item but the fence mark items (FenceMarkEntity).
func (s *Store) Scan(ctx context.Context, fn func(sink.Item) error) error {
	var start map[string]types.AttributeValue
	for {
		var out *dynamodb.ScanOutput
		err := s.do(ctx, "scan", func(ctx context.Context) error {
			var err error
			out, err = s.api.Scan(ctx, &dynamodb.ScanInput{
				TableName:         aws.String(s.o.Table),
				ConsistentRead:    aws.Bool(true),
				ExclusiveStartKey: start,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("dynamo: scan: %w", err)
		}
		if err := s.each(out.Items, fn); err != nil {
			return err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}

func (s *Store) each(items []map[string]types.AttributeValue, fn func(sink.Item) error) error {
	for _, av := range items {
		it, err := decodeItem(av)
		if err != nil {
			return err
		}
		if isFenceMark(it.Key) {
			continue // no row
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// Remove removes w's five attributes from k with one UpdateItem conditioned
// on <w>_ckpt = ckpt. ok is false when the condition failed (including when
// there is no item); the item itself, with job_gen, stays.
func (s *Store) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, error) {
	e, err := s.exprs("remove", w)
	if err != nil {
		return false, err
	}
	ok, err := s.update(ctx, "remove", k, e.removeUpdate, e.removeCond, e.removeNames,
		map[string]types.AttributeValue{":c": num(ckpt)})
	if err != nil {
		return false, fmt.Errorf("dynamo: remove %s attributes: %w", w, err)
	}
	s.countRemove(ok)
	return ok, nil
}

// RemoveFenced is Remove under t (sink.FencedRows). With a fence above 0
// it sends one UpdateItem conditioned on <w>_ckpt = ckpt, job_gen = t.Gen
// and wf <= t.Fence that also sets wf = t.Fence, and only if that is
// refused a second one for an item of another generation, conditioned on
// <w>_ckpt = ckpt and job_gen <> t.Gen, which leaves wf alone (fences of
// two generations are not comparable). With fence 0 there is nothing to
// raise: one UpdateItem conditioned on <w>_ckpt = ckpt and
// (wf <= 0 OR job_gen <> t.Gen).
func (s *Store) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, error) {
	e, err := s.exprs("remove", w)
	if err != nil {
		return false, err
	}
	if err := sink.ValidFence(t.Fence); err != nil {
		return false, fmt.Errorf("dynamo: remove %s attributes: %w", w, err)
	}
	ok, err := s.removeFenced(ctx, e, k, ckpt, t)
	if err != nil {
		return false, fmt.Errorf("dynamo: remove %s attributes: %w", w, err)
	}
	s.countRemove(ok)
	return ok, nil
}

func (s *Store) removeFenced(ctx context.Context, e *writerExprs, k sink.Key, ckpt int64, t sink.Token) (bool, error) {
	c, g, f := num(ckpt), num(t.Gen), num(t.Fence)
	if t.Fence == 0 {
		return s.update(ctx, "remove", k, e.removeUpdate, e.fenceZeroCond, e.fenceNames,
			map[string]types.AttributeValue{":c": c, ":g": g, ":f": f})
	}
	ok, err := s.update(ctx, "remove", k, e.fenceRaise, e.fenceRaiseCond, e.fenceNames,
		map[string]types.AttributeValue{":c": c, ":g": g, ":f": f})
	if err != nil || ok {
		return ok, err
	}
	return s.update(ctx, "remove", k, e.removeUpdate, e.fenceOtherCond, e.fenceOtherNames,
		map[string]types.AttributeValue{":c": c, ":g": g})
}

// update sends one conditional UpdateItem of k; ok is false when its
// condition refused it.
func (s *Store) update(ctx context.Context, op string, k sink.Key, update, cond string, names map[string]string, vals map[string]types.AttributeValue) (bool, error) {
	err := s.do(ctx, op, func(ctx context.Context) error {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.o.Table),
			Key:                       keyOf(k),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		})
		return err
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errCondition):
		return false, nil
	}
	return false, err
}

func (s *Store) countRemove(ok bool) {
	if ok {
		s.m.writes.WithLabelValues("remove").Inc()
	} else {
		s.m.refused.WithLabelValues("remove").Inc()
	}
}

// Delete deletes k with one DeleteItem conditioned on <w>_ckpt = ckpt and on
// the absence of every other writer's attributes. If that condition fails,
// it falls back to Remove, which succeeds only if <w>_ckpt = ckpt: so an item
// carrying another writer's attributes loses only w's.
//
// A retried DeleteItem whose first attempt was applied but whose answer was
// lost reports deleted=false, ok=false: the item is gone all the same.
func (s *Store) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (deleted, ok bool, err error) {
	return s.delete(ctx, k, w, ckpt, nil)
}

// DeleteFenced is Delete under t (sink.FencedRows): the DeleteItem is also
// conditioned on (wf <= t.Fence OR job_gen <> t.Gen), and the fallback is
// RemoveFenced under t.
func (s *Store) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (deleted, ok bool, err error) {
	if err := sink.ValidFence(t.Fence); err != nil {
		return false, false, fmt.Errorf("dynamo: delete item: %w", err)
	}
	return s.delete(ctx, k, w, ckpt, &t)
}

func (s *Store) delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t *sink.Token) (deleted, ok bool, err error) {
	e, err := s.exprs("delete", w)
	if err != nil {
		return false, false, err
	}
	cond, names := e.deleteCond, e.deleteNames
	vals := map[string]types.AttributeValue{":c": num(ckpt)}
	if t != nil {
		cond, names = e.fenceDelCond, e.fenceDelNames
		vals[":g"], vals[":f"] = num(t.Gen), num(t.Fence)
	}
	err = s.do(ctx, "delete", func(ctx context.Context) error {
		_, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName:                 aws.String(s.o.Table),
			Key:                       keyOf(k),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		})
		return err
	})
	switch {
	case err == nil:
		s.m.writes.WithLabelValues("delete").Inc()
		return true, true, nil
	case !errors.Is(err, errCondition):
		return false, false, fmt.Errorf("dynamo: delete item: %w", err)
	}
	if t != nil {
		ok, err = s.RemoveFenced(ctx, k, w, ckpt, *t)
	} else {
		ok, err = s.Remove(ctx, k, w, ckpt)
	}
	if err != nil {
		return false, false, fmt.Errorf("dynamo: delete item: %w", err)
	}
	return false, ok, nil
}
