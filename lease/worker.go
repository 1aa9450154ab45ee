package lease

import (
	"github.com/adclick/adclick/windowing"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrChanged is wrapped by the error of a write refused because its item
// is no longer as the snapshot it was based on showed it: another worker
// wrote it first. It is a lost race, not a fault: scan again and let
// Balance decide anew. Match it with errors.Is.
var ErrChanged = errors.New("lease: changed since it was read")

// WorkerOptions configures NewWorker. The zero value of each optional field
// selects its default; Table and Job are required.
type WorkerOptions struct {
	// Table is the lease table (CreateTable makes it). Required.
	Table string
	// Job names the job whose ranges, slots and recount lease the worker
	// takes. Required; at most 1,000 bytes of UTF-8.
	Job string
	// ID identifies this worker to the balancer and in handoff requests.
	// Every lease it takes is owned by "<ID>~<nonce>", a nonce drawn per
	// take, so that a condition on the owner names one tenure only and can
	// never be met by an older holder, even one of another process with the
	// same ID (a replacement started while the old process is cut off).
	// Two live processes should still not share an ID: the balancer would
	// count them as one worker. Default NewOwner(); at most 480 bytes of
	// UTF-8.
	ID string
	// Duration is the lease duration D of every lease the worker takes, as
	// Options.Duration. Every worker of a job should use the same value.
	// Default 30 s; at least MinDuration.
	Duration time.Duration
	// HandoffTimeout is how long a handoff request may go unanswered
	// before it lapses (BalanceOptions.HandoffTimeout). Default 2 ×
	// Duration.
	HandoffTimeout time.Duration
	// Address is written into the slot this worker takes (its API address,
	// for operators and the other workers); optional.
	Address string
	// Clock times every decision. Default SystemClock().
	Clock Clock
	// Logger receives takes, losses and handoffs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the metrics, labelled with the job; nil registers
	// none. Metrics already registered by another worker of the job are
	// reused.
	Registerer prometheus.Registerer
}

// EnsureDefaults sets every zero optional field to its default and returns
// o.
func (o *WorkerOptions) EnsureDefaults() *WorkerOptions {
	if o.ID == "" {
		o.ID = NewOwner()
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.HandoffTimeout == 0 {
		o.HandoffTimeout = 2 * o.Duration
	}
	if o.Clock == nil {
		o.Clock = SystemClock()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem with o (joined), or nil.
func (o *WorkerOptions) Validate() error {
	errs := checkTableAndJob(o.Table, o.Job)
	if o.ID == "" || len(o.ID) > 480 || !utf8.ValidString(o.ID) {
		errs = append(errs, fmt.Errorf("lease: worker id %q must be 1 to 480 bytes of UTF-8", o.ID))
	}
	if o.Duration < MinDuration {
		errs = append(errs, fmt.Errorf("lease: duration %v must be at least %v", o.Duration, MinDuration))
	}
	if o.HandoffTimeout < o.Duration {
		errs = append(errs, fmt.Errorf("lease: handoff timeout %v must be at least the lease duration %v", o.HandoffTimeout, o.Duration))
	}
	if o.Clock == nil {
		errs = append(errs, errors.New("lease: no clock"))
	}
	if o.Logger == nil {
		errs = append(errs, errors.New("lease: no logger"))
	}
	return errors.Join(errs...)
}

// Worker is one worker's side of a multi-worker job's lease table: it
// reads the table (Scan, Read) and sends the conditional writes of the
// scale-out note's §6.2 that are not a holder's own (setup, create,
// activate, the ranges map, takes, handoff requests). A take returns a
// Claim, through which the holder renews, writes its checkpoints and lets
// go. Which ranges to take, ask for or hand off is Balance's decision; a
// Worker does what it is told, each write conditional on the item being as
// the snapshot showed it. Safe for concurrent use.
type Worker struct {
	api   RangeAPI
	o     WorkerOptions
	m     *workerMetrics
	log   *slog.Logger
	nonce func() string // a take's nonce

	mu        sync.Mutex
	malformed map[string]bool // keys of items a scan skipped as malformed, logged once each
}

// NewWorker returns the worker o describes, talking to api.
func NewWorker(api RangeAPI, o WorkerOptions) (*Worker, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m, err := newWorkerMetrics(o.Registerer, o.Job)
	if err != nil {
		return nil, err
	}
	// Every call is bounded below the renewal period (callTimeout).
	return &Worker{api: newTimedRange(api, callTimeout(o.Duration)), o: o, m: m, log: o.Logger.With("job", o.Job, "worker", o.ID), nonce: randomNonce, malformed: map[string]bool{}}, nil
}

// randomNonce returns 16 random hex digits.
func randomNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ID returns this worker's id.
func (w *Worker) ID() string { return w.o.ID }

// Job returns the job's name.
func (w *Worker) Job() string { return w.o.Job }

// Options returns the worker's options, defaults filled in.
func (w *Worker) Options() WorkerOptions { return w.o }

// BalanceOptions returns the times Balance should decide by for this
// worker: its lease duration and handoff timeout.
func (w *Worker) BalanceOptions() BalanceOptions {
	return BalanceOptions{Duration: w.o.Duration, HandoffTimeout: w.o.HandoffTimeout}
}

// rangeNames are the expression attribute names of the worker's writes;
// each request carries the ones its expressions use.
var rangeNames = map[string]string{
	"#k": attrKey, "#o": attrOwner, "#c": attrCounter, "#r": attrRenewedAt, "#d": attrDurationMs, "#j": attrJob,
	"#f": attrFrom, "#t": attrTo, "#lo": attrLastOwner, "#fe": attrFence, "#st": attrState, "#or": attrOrigins,
	"#cp": attrCheckpoint, "#ck": attrCheckpointKey, "#wm": attrWatermark, "#eh": attrEpochHigh, "#h": attrHandoffTo,
	"#sw": attrOwnerSwitches, "#sd": attrSweepDue, "#rs": attrRanges, "#v": attrVersion, "#sl": attrSlot,
	"#ad": attrAddress, "#ca": attrConsumerARN,
}

// request builds one conditional UpdateItem of the item at key, returning
// the item as written.
func (w *Worker) request(key, cond, upd string, vals map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	names := map[string]string{}
	for ph, n := range rangeNames {
		if containsToken(cond, ph) || containsToken(upd, ph) {
			names[ph] = n
		}
	}
	vs := map[string]types.AttributeValue{}
	for k, v := range vals {
		if containsToken(cond, k) || containsToken(upd, k) {
			vs[k] = v
		}
	}
	in := &dynamodb.UpdateItemInput{
		TableName:        aws.String(w.o.Table),
		Key:              map[string]types.AttributeValue{attrKey: avS(key)},
		UpdateExpression: aws.String(upd),
		ReturnValues:     types.ReturnValueAllNew,
	}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
	}
	if len(names) > 0 {
		in.ExpressionAttributeNames = names
	}
	if len(vs) > 0 {
		in.ExpressionAttributeValues = vs
	}
	return in
}

// The conditions and updates of the worker's writes (§6.2). Every write
// that moves the counter sets it to an absolute value (:n) under a
// condition naming the value read (:c). An item without a state attribute
// (written before ranges had one) counts as active.
const (
	isActive = "(attribute_not_exists(#st) OR #st = :active)"

	// A free range: not held, unchanged since read, active, and reserved
	// for nobody or for this worker.
	condTakeFree = "attribute_not_exists(#o) AND #c = :c AND " + isActive + " AND (attribute_not_exists(#h) OR #h = :wid)"
	// A free range reserved for a worker whose handoff lapsed (:x), still
	// as watched.
	condTakeLapsed = "attribute_not_exists(#o) AND #c = :c AND " + isActive + " AND #h = :x"
	// A holder (:o) watched and found dead: its counter did not move.
	condTakeOver = "#o = :o AND #c = :c AND " + isActive
	// A slot or the recount lease, never taken yet.
	condTakeNew = "attribute_not_exists(#k)"

	updTakeBase = "SET #o = :me, #c = :n, #fe = :n, #r = :r, #d = :d, #j = :j"

	// Ask the holder (:o) for a handoff.
	condAsk = "#o = :o AND attribute_not_exists(#h) AND " + isActive
	updAsk  = "SET #h = :wid"
	// Remove the handoff request of :x, on an item held by :o or free.
	condCancelHeld = "#h = :x AND #o = :o"
	condCancelFree = "#h = :x AND attribute_not_exists(#o)"
	updCancel      = "REMOVE #h"

	condCreateItem = "attribute_not_exists(#k)"
	updCreateRange = "SET #st = :st, #c = :c0, #j = :j, #f = :f, #t = :t, #eh = :eh, #sw = :zero"
	updCreateMap   = "SET #rs = :rs, #v = :one, #j = :j"

	condActivate = "#st = :pending"
	updActivate  = "SET #st = :active"

	condMapVersion = "#v = :v"
	updMap         = "SET #rs = :rs, #v = :n"
)

// TableScan is one consistent read of a job's whole lease table.
type TableScan struct {
	Map   *RangesMap    // the ranges map; nil before setup
	Items []Item        // every range, slot and recount item of the job, by key
	At    time.Duration // the worker's clock once the scan's last page had arrived
}

// Scan reads every item of the job (consistent reads, all pages). At is
// taken after the answer arrived, as a watch must start after the read it
// is based on (see Watcher). A range, slot or recount item that cannot be
// decoded (an operator's edit, a bug) is left out, so that it does not
// keep every worker from balancing the others: the gauge
// adclick_lease_malformed_items counts those of the last scan, and each is
// logged once (again if it is repaired and breaks anew). Nobody takes or
// renews it until it is repaired. A malformed ranges map fails the scan.
func (w *Worker) Scan(ctx context.Context) (TableScan, error) {
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(w.o.Table),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("begins_with(#k, :p)"),
		ExpressionAttributeNames:  map[string]string{"#k": attrKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": avS(w.o.Job + "#")},
	}
	var s TableScan
	bad := map[string]error{}
	for {
		out, err := w.api.Scan(ctx, in)
		if err != nil {
			return TableScan{}, fmt.Errorf("lease: scan %s for job %s: %w", w.o.Table, w.o.Job, err)
		}
		for _, av := range out.Items {
			k, ok := av[attrKey].(*types.AttributeValueMemberS)
			if !ok {
				continue
			}
			if k.Value == RangesKey(w.o.Job) {
				m, err := decodeMap(av)
				if err != nil {
					return TableScan{}, fmt.Errorf("lease: scan %s: malformed ranges map %s: %w", w.o.Table, k.Value, err)
				}
				s.Map = m
				continue
			}
			if _, _, _, ok := parseKey(w.o.Job, k.Value); !ok {
				continue // another job whose name starts with this one's and "#"
			}
			it, err := decodeLease(w.o.Job, k.Value, av)
			if err != nil {
				bad[k.Value] = err
				continue
			}
			s.Items = append(s.Items, it)
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	s.At = w.o.Clock.Now()
	sortItems(s.Items)
	w.noteMalformed(bad)
	return s, nil
}

// noteMalformed records the malformed items of a scan: the gauge, and a
// log line for each not logged before.
func (w *Worker) noteMalformed(bad map[string]error) {
	w.m.malformed.Set(float64(len(bad)))
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.malformed {
		if _, ok := bad[key]; !ok {
			delete(w.malformed, key) // repaired (or gone)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(bad)) {
		if w.malformed[key] {
			continue
		}
		w.malformed[key] = true
		w.log.Error("lease item is malformed: left out of every scan until it is repaired; nobody takes it", "lease", key, "table", w.o.Table, "err", bad[key])
	}
}

// Read reads one lease item of the job (a consistent read), and the
// worker's clock once the answer arrived: for watching one item more often
// than the table is scanned (Watcher.ObserveItem).
func (w *Worker) Read(ctx context.Context, key string) (Item, time.Duration, error) {
	it, err := w.read(ctx, key)
	return it, w.o.Clock.Now(), err
}

func (w *Worker) read(ctx context.Context, key string) (Item, error) {
	out, err := w.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(w.o.Table),
		Key:            map[string]types.AttributeValue{attrKey: avS(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Item{}, fmt.Errorf("lease: read %s: %w", key, err)
	}
	it, err := decodeLease(w.o.Job, key, out.Item)
	if err != nil {
		return Item{}, fmt.Errorf("lease: read %s in table %s: malformed item: %w", key, w.o.Table, err)
	}
	return it, nil
}

// ReadMap reads the ranges map (a consistent read); nil before setup.
func (w *Worker) ReadMap(ctx context.Context) (*RangesMap, error) {
	key := RangesKey(w.o.Job)
	out, err := w.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(w.o.Table),
		Key:            map[string]types.AttributeValue{attrKey: avS(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("lease: read %s: %w", key, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	m, err := decodeMap(out.Item)
	if err != nil {
		return nil, fmt.Errorf("lease: read %s in table %s: malformed ranges map: %w", key, w.o.Table, err)
	}
	return m, nil
}

// Setup writes the job's ranges map and one active range item per range,
// each counter 0 (adclick setup --ranges). It is idempotent: items that
// exist are kept as they are (a single-worker job's lease 0-128 among
// them), and a map that exists must list the same ranges.
//
// A job that ran as a single process (its job lease, an item "<job>#kg0-128"
// without a state, written by Acquire) is refused: its rows, checkpoints and
// epochs are those of one job under one lease model, and a fleet must start
// as a new job.
func (w *Worker) Setup(ctx context.Context, ranges []Range) error {
	if err := CheckCover(ranges); err != nil {
		return err
	}
	single := RangeKey(w.o.Job, Range{From: 0, To: windowing.MaxParallelism})
	out, err := w.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.o.Table),
		Key: map[string]types.AttributeValue{attrKey: avS(single)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("lease: set up %s: %w", w.o.Job, err)
	}
	if _, ranged := out.Item[attrState]; out.Item != nil && !ranged {
		return fmt.Errorf("lease: job %s ran as a single process (its lease %s is in %s): a fleet must be a new job; give it another job name", w.o.Job, single, w.o.Table)
	}
	key := RangesKey(w.o.Job)
	_, err = w.api.UpdateItem(ctx, w.request(key, condCreateItem, updCreateMap, map[string]types.AttributeValue{
		":rs": rangesValue(ranges), ":one": avN(1), ":j": avS(w.o.Job),
	}))
	if err != nil && !isRefused(err) {
		return fmt.Errorf("lease: set up %s: %w", key, err)
	}
	if err != nil {
		m, err := w.ReadMap(ctx)
		if err != nil {
			return err
		}
		if m == nil || !slices.Equal(m.Ranges, ranges) {
			return fmt.Errorf("lease: job %s is already set up with other ranges (%v): split or merge instead", w.o.Job, m)
		}
	}
	for _, r := range ranges {
		if err := w.CreateRange(ctx, RangeSpec{Range: r, State: StateActive}); err != nil && !errors.Is(err, ErrChanged) {
			return err
		}
	}
	return nil
}

// RangeSpec is a range item to create: at setup (active, counter 0), or a
// split's or merge's new range (pending, with origins).
type RangeSpec struct {
	Range Range
	State State // StateActive or StatePending
	// Counter is the item's first counter. A new range of a split or merge
	// must start above every origin's counter, so that the fence of its
	// first take is above every fence its key groups had.
	Counter int64
	// EpochHigh is the epoch high-water mark it starts from: a new range
	// continues above every origin's.
	EpochHigh int64
	Origins   []Origin
}

// CreateRange creates a range item, which must not exist (ErrChanged if
// it does).
func (w *Worker) CreateRange(ctx context.Context, s RangeSpec) error {
	if !validRange(s.Range) {
		return fmt.Errorf("lease: create range %v: not within [0, %d)", s.Range, windowing.MaxParallelism)
	}
	if s.State != StateActive && s.State != StatePending {
		return fmt.Errorf("lease: create range %v in state %q: want active or pending", s.Range, s.State)
	}
	key := RangeKey(w.o.Job, s.Range)
	upd := updCreateRange
	vals := map[string]types.AttributeValue{
		":st": avS(string(s.State)), ":c0": avN(s.Counter), ":j": avS(w.o.Job), ":f": avN(int64(s.Range.From)),
		":t": avN(int64(s.Range.To)), ":eh": avN(s.EpochHigh), ":zero": avN(0),
	}
	if len(s.Origins) > 0 {
		upd += ", #or = :or"
		vals[":or"] = originsValue(s.Origins)
	}
	if _, err := w.api.UpdateItem(ctx, w.request(key, condCreateItem, upd, vals)); err != nil {
		if isRefused(err) {
			w.m.refused.WithLabelValues("create").Inc()
			return fmt.Errorf("lease: create %s: it exists: %w", key, ErrChanged)
		}
		return fmt.Errorf("lease: create %s: %w", key, err)
	}
	return nil
}

// Activate makes a pending range active (the last step of a split or a
// merge); a range already active is left so (nil), which lets any worker
// finish a split that stopped half-way.
func (w *Worker) Activate(ctx context.Context, r Range) error {
	key := RangeKey(w.o.Job, r)
	_, err := w.api.UpdateItem(ctx, w.request(key, condActivate, updActivate, map[string]types.AttributeValue{
		":pending": avS(string(StatePending)), ":active": avS(string(StateActive)),
	}))
	if err == nil {
		return nil
	}
	if !isRefused(err) {
		return fmt.Errorf("lease: activate %s: %w", key, err)
	}
	cur, rerr := w.read(ctx, key)
	if rerr != nil {
		return fmt.Errorf("lease: activate %s: refused, and the item cannot be read: %w", key, rerr)
	}
	if cur.Exists && cur.State == StateActive {
		return nil
	}
	w.m.refused.WithLabelValues("activate").Inc()
	return fmt.Errorf("lease: activate %s: it is %s (exists %v), not pending: %w", key, cur.State, cur.Exists, ErrChanged)
}

// UpdateMap replaces the ranges map seen (by a split or a merge) with
// ranges, conditional on its version.
func (w *Worker) UpdateMap(ctx context.Context, seen RangesMap, ranges []Range) error {
	if err := CheckCover(ranges); err != nil {
		return err
	}
	key := RangesKey(w.o.Job)
	_, err := w.api.UpdateItem(ctx, w.request(key, condMapVersion, updMap, map[string]types.AttributeValue{
		":v": avN(seen.Version), ":n": avN(seen.Version + 1), ":rs": rangesValue(ranges),
	}))
	if err != nil {
		if isRefused(err) {
			w.m.refused.WithLabelValues("map").Inc()
			return fmt.Errorf("lease: update %s: not at version %d: %w", key, seen.Version, ErrChanged)
		}
		return fmt.Errorf("lease: update %s: %w", key, err)
	}
	return nil
}

// Take takes the lease seen (a range, a slot or the recount lease, as a
// Snapshot showed it and Balance or ChooseSlot chose it) under a new owner
// string "<ID>~<nonce>", conditional on the item being unchanged since:
//   - an item never written (a slot, the recount lease): attribute_not_exists;
//   - a free range: attribute_not_exists(owner) AND counter = :c AND
//     state = active AND (attribute_not_exists(handoff_to) OR handoff_to =
//     this worker's ID); a range reserved for another worker whose handoff
//     lapsed is taken with handoff_to = that worker instead;
//   - a held one, whose holder the caller watched and found dead (its
//     counter did not move for a lease duration): owner = :o AND counter =
//     :c AND state = active.
//
// The write sets the owner, counter = fence = :c + 1 (the fence
// of this tenure, above every earlier one of the range), removes any
// handoff request, and raises owner_switches (the take's condition also
// names the value read, so a commit that resets it in between refuses the
// take). It returns the item as written: the checkpoint, epoch high and
// sweep due the new holder must restore from are those of the item at the
// instant of the take, so nothing the old holder commits later can be
// missed (its writes are refused by the fence from then on).
//
// An item this worker owns in the table but holds no Claim of (a tenure
// it lost by not renewing in time, or a take whose answer never came) is
// taken over like any other once watched: the new fence tells the tenures
// apart.
//
// A refused take returns an error wrapping ErrChanged. A take whose answer
// was lost but which was applied is recognised by owner and fence on a
// read and confirmed with a renewal.
func (w *Worker) Take(ctx context.Context, seen Item) (*Claim, error) {
	me := w.o.ID + ownerSep + w.nonce() // this tenure's owner string
	key := seen.Key
	if seen.Kind == KindRange && !seen.Exists {
		return nil, fmt.Errorf("lease: take %s: no such range item (not set up)", key)
	}
	next := seen.Counter + 1
	if !seen.Exists {
		next = 1
	}
	vals := map[string]types.AttributeValue{
		":me": avS(me), ":wid": avS(w.o.ID), ":c": avN(seen.Counter), ":n": avN(next), ":o": avS(seen.Owner), ":x": avS(seen.HandoffTo),
		":r": wallString(w.o.Clock.Wall()), ":d": avN(w.o.Duration.Milliseconds()), ":j": avS(w.o.Job),
		":active": avS(string(StateActive)), ":sw": avN(seen.OwnerSwitches), ":sw1": avN(seen.OwnerSwitches + 1),
		":f": avN(int64(seen.Range.From)), ":t": avN(int64(seen.Range.To)), ":sl": avN(int64(seen.Slot)), ":ad": avS(w.o.Address),
	}
	var cond, how string
	switch {
	case !seen.Exists:
		cond, how = condTakeNew, "new"
	case seen.Owner != "":
		cond, how = condTakeOver, "takeover"
	case seen.HandoffTo == "":
		cond, how = condTakeFree, "free"
	case seen.HandoffTo == w.o.ID:
		cond, how = condTakeFree, "handoff"
	default:
		cond, how = condTakeLapsed, "lapsed"
	}
	upd := updTakeBase
	switch seen.Kind {
	case KindRange:
		if seen.OwnerSwitches == 0 {
			cond += " AND (attribute_not_exists(#sw) OR #sw = :sw)"
		} else {
			cond += " AND #sw = :sw"
		}
		upd += ", #sw = :sw1, #f = :f, #t = :t"
	case KindSlot:
		upd += ", #sl = :sl"
		if w.o.Address != "" {
			upd += ", #ad = :ad"
		}
	}
	if how == "takeover" {
		upd += ", #lo = :o"
	}
	if seen.Kind == KindRange {
		upd += " REMOVE #h"
	}
	sent := w.o.Clock.Now()
	out, err := w.api.UpdateItem(ctx, w.request(key, cond, upd, vals))
	if err == nil {
		it, derr := decodeLease(w.o.Job, key, out.Attributes)
		if derr != nil || !it.Exists {
			it = seen // the write is applied; a read will tell the rest
			it.Exists, it.Owner, it.Worker, it.Counter, it.Fence, it.HandoffTo = true, me, w.o.ID, next, next, ""
		}
		c := newClaim(w, it, me, next)
		c.confirmed, c.validFrom = true, sent
		if how == "takeover" {
			c.prevFence = max(seen.Fence, 1)
		}
		w.m.takes.WithLabelValues(seen.Kind.String(), how).Inc()
		w.logTake(c, seen, how)
		return c, nil
	}
	refused := isRefused(err)
	// Either another worker wrote the item first, or this one did (the
	// SDK's retry of a request whose answer was lost, or a request that
	// failed here but was applied): only a read tells.
	cur, rerr := w.read(ctx, key)
	if rerr == nil && cur.Owner == me && cur.Fence == next {
		c := newClaim(w, cur, me, next)
		if how == "takeover" {
			c.prevFence = max(seen.Fence, 1)
		}
		if err := c.Renew(ctx); err != nil {
			return nil, fmt.Errorf("lease: take %s: confirming a take whose answer was lost: %w", key, err)
		}
		w.m.takes.WithLabelValues(seen.Kind.String(), how).Inc()
		w.logTake(c, seen, how)
		return c, nil
	}
	if !refused {
		return nil, fmt.Errorf("lease: take %s: %w", key, err)
	}
	w.m.refused.WithLabelValues("take").Inc()
	if rerr != nil {
		return nil, fmt.Errorf("lease: take %s: %w (and the item cannot be read: %v)", key, ErrChanged, rerr)
	}
	return nil, fmt.Errorf("lease: take %s: %w: now held by %q (counter %d, state %s, handoff to %q), was %q (counter %d)",
		key, ErrChanged, cur.Owner, cur.Counter, cur.State, cur.HandoffTo, seen.Owner, seen.Counter)
}

func (w *Worker) logTake(c *Claim, seen Item, how string) {
	switch how {
	case "takeover":
		w.log.Warn("lease taken over: its holder did not renew it for one lease duration", "lease", c.key, "holder", seen.Owner, "fence", c.fence)
	case "lapsed":
		w.log.Warn("lease taken: a handoff reserved it for a worker that did not take it in time", "lease", c.key, "reserved_for", seen.HandoffTo, "fence", c.fence)
	default:
		w.log.Info("lease taken", "lease", c.key, "how", how, "fence", c.fence)
	}
}

// AskHandoff asks the holder of the range seen to hand it off to this
// worker (KCL's steal, done gracefully as in KCL 3): handoff_to = its ID,
// conditional on the same holder and on no other request pending. The
// holder sees it at its next renewal or scan, takes a final checkpoint,
// and releases the range reserved for this worker, which then takes it at
// once (Balance lists it in Take). A request not honoured within the
// handoff timeout lapses (Balance lists it in Cancel): a live holder's
// lease is never taken from it.
func (w *Worker) AskHandoff(ctx context.Context, seen Item) error {
	if seen.Kind != KindRange || seen.Owner == "" || seen.Worker == w.o.ID {
		return fmt.Errorf("lease: ask for %s: only a range held by another worker can be asked for", seen.Key)
	}
	_, err := w.api.UpdateItem(ctx, w.request(seen.Key, condAsk, updAsk, map[string]types.AttributeValue{
		":o": avS(seen.Owner), ":wid": avS(w.o.ID), ":active": avS(string(StateActive)),
	}))
	if err != nil {
		if isRefused(err) {
			w.m.refused.WithLabelValues("ask").Inc()
			return fmt.Errorf("lease: ask %s of %s for a handoff: %w", seen.Key, seen.Owner, ErrChanged)
		}
		return fmt.Errorf("lease: ask %s of %s for a handoff: %w", seen.Key, seen.Owner, err)
	}
	w.m.asks.Inc()
	w.log.Info("handoff asked", "lease", seen.Key, "holder", seen.Owner)
	return nil
}

// CancelHandoff removes the handoff request seen carries, conditional on
// the same request and the same holder (or none): this worker's own
// request that lapsed, or one asked of this worker by a worker no longer
// live. If the range was released to this worker meanwhile the condition
// fails (ErrChanged), and the next Balance lists it in Take instead.
func (w *Worker) CancelHandoff(ctx context.Context, seen Item) error {
	if seen.HandoffTo == "" {
		return nil
	}
	cond := condCancelHeld
	if seen.Owner == "" {
		cond = condCancelFree
	}
	_, err := w.api.UpdateItem(ctx, w.request(seen.Key, cond, updCancel, map[string]types.AttributeValue{
		":x": avS(seen.HandoffTo), ":o": avS(seen.Owner),
	}))
	if err != nil {
		if isRefused(err) {
			w.m.refused.WithLabelValues("cancel").Inc()
			return fmt.Errorf("lease: cancel the handoff of %s to %s: %w", seen.Key, seen.HandoffTo, ErrChanged)
		}
		return fmt.Errorf("lease: cancel the handoff of %s to %s: %w", seen.Key, seen.HandoffTo, err)
	}
	w.m.cancelled.Inc()
	w.log.Info("handoff request removed", "lease", seen.Key, "asked_by", seen.HandoffTo, "holder", seen.Owner)
	return nil
}
