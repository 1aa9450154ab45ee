package lease

import (
	"github.com/adclick/adclick/windowing"

	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// RangeAPI is the part of the DynamoDB client a worker of a multi-worker
// job uses: API plus Scan, with which it reads its job's whole lease table
// every scan period. *dynamodb.Client implements it, and so does Mem.
type RangeAPI interface {
	API
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ RangeAPI = (*dynamodb.Client)(nil)

// Range is a contiguous span of key groups [From, To): the unit of lease,
// state, checkpoint and flush of a multi-worker job. It is windowing's
// KeyGroups, so a range has one name everywhere ("kg<from>-<to>", its
// String: lease keys, logs, scopes, checkpoint prefixes); only the ranges
// map and the origins store it as "<from>-<to>" (rangeText).
type Range = windowing.KeyGroups

// AllKeyGroups is the range of a single-worker job: every key group.
var AllKeyGroups = windowing.AllKeyGroups

// rangeText is a range as the ranges map and the origins hold it:
// "<from>-<to>" (ParseRange's form).
func rangeText(r Range) string { return strconv.Itoa(r.From) + "-" + strconv.Itoa(r.To) }

// validRange reports whether r is a non-empty range within [0,
// windowing.MaxParallelism), written out: the zero Range, which windowing
// reads as every key group, is no range of a lease item.
func validRange(r Range) bool { return r != (Range{}) && r.Valid() }

// overlaps reports whether r and o share a key group.
func overlaps(r, o Range) bool { return r.From < o.To && o.From < r.To }

// ParseRange parses "<from>-<to>" (String's form) and checks the range.
func ParseRange(s string) (Range, error) {
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("lease: range %q is not <from>-<to>", s)
	}
	f, err1 := strconv.Atoi(from)
	t, err2 := strconv.Atoi(to)
	r := Range{From: f, To: t}
	if err1 != nil || err2 != nil || strconv.Itoa(f) != from || strconv.Itoa(t) != to || !validRange(r) {
		return Range{}, fmt.Errorf("lease: range %q must be <from>-<to> with 0 <= from < to <= %d", s, windowing.MaxParallelism)
	}
	return r, nil
}

// EvenRanges cuts the key groups [0, windowing.MaxParallelism) into n
// contiguous ranges whose sizes differ by at most one (16 gives 16 ranges
// of 8 key groups).
func EvenRanges(n int) ([]Range, error) {
	if n < 1 || n > windowing.MaxParallelism {
		return nil, fmt.Errorf("lease: %d ranges: want 1 to %d", n, windowing.MaxParallelism)
	}
	out := make([]Range, n)
	for i := range n {
		out[i] = Range{From: i * windowing.MaxParallelism / n, To: (i + 1) * windowing.MaxParallelism / n}
	}
	return out, nil
}

// CheckCover reports whether ranges are sorted, disjoint and together
// cover every key group exactly once, as the ranges map must.
func CheckCover(ranges []Range) error {
	next := 0
	for _, r := range ranges {
		if !validRange(r) {
			return fmt.Errorf("lease: range %v is not within [0, %d)", r, windowing.MaxParallelism)
		}
		if r.From != next {
			return fmt.Errorf("lease: ranges %v do not cover key group %d exactly once", ranges, next)
		}
		next = r.To
	}
	if next != windowing.MaxParallelism {
		return fmt.Errorf("lease: ranges %v do not cover key groups %d to %d", ranges, next, windowing.MaxParallelism)
	}
	return nil
}

// RangeKey returns the lease key of a range of job: "<job>#kg<from>-<to>"
// (Options.Key's form, so that the range 0-128 is a single-worker job's
// lease).
func RangeKey(job string, r Range) string { return job + "#" + r.String() }

// SlotKey returns the lease key of worker slot k of job: "<job>#slot<k>".
func SlotKey(job string, k int) string { return job + "#slot" + strconv.Itoa(k) }

// RangesKey returns the key of job's ranges map: "<job>#ranges".
func RangesKey(job string) string { return job + "#ranges" }

// RecountKey returns the key of job's recount lease: "<job>#recount".
func RecountKey(job string) string { return job + "#recount" }

// Kind tells what a lease item stands for.
type Kind uint8

// The kinds of lease items.
const (
	KindRange   Kind = iota + 1 // "<job>#kg<from>-<to>": a key-group range
	KindSlot                    // "<job>#slot<k>": a worker's slot
	KindRecount                 // "<job>#recount": the recount finalizer
)

func (k Kind) String() string {
	switch k {
	case KindRange:
		return "range"
	case KindSlot:
		return "slot"
	case KindRecount:
		return "recount"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// parseKey tells what the lease key of job stands for; ok is false for a
// key of another job or an unknown one.
func parseKey(job, key string) (kind Kind, r Range, slot int, ok bool) {
	rest, found := strings.CutPrefix(key, job+"#")
	if !found {
		return 0, Range{}, 0, false
	}
	switch {
	case rest == "recount":
		return KindRecount, Range{}, 0, true
	case strings.HasPrefix(rest, "kg"):
		r, err := ParseRange(rest[2:])
		return KindRange, r, 0, err == nil
	case strings.HasPrefix(rest, "slot"):
		k, err := strconv.Atoi(rest[4:])
		return KindSlot, Range{}, k, err == nil && k >= 0 && strconv.Itoa(k) == rest[4:]
	}
	return 0, Range{}, 0, false
}

// State is the life-cycle state of a range (§10.1 of the scale-out note):
// a range is created pending, becomes active, and is retired by a split or
// a merge. Only an active range can be taken.
type State string

// The states of a range. A range item written before ranges had a state
// (a single-worker job's lease) is active.
const (
	StatePending State = "pending"
	StateActive  State = "active"
	StateRetired State = "retired"
)

// Origin is one range a new range (of a split or a merge) restores from:
// its key groups, the checkpoint it committed before it was retired, the S3
// prefix of its checkpoints and its epoch high-water mark.
type Origin struct {
	Range      Range
	Checkpoint int64
	Prefix     string
	EpochHigh  int64
}

// SweepDue is a fence sweep a new owner owes after a takeover (§6.5): the
// writes of fences below its own in epochs [From, To] are removed once
// NotBefore (wall clock, an AWS signature window after the takeover) has
// passed. A holder never tags its own writes with an epoch of a sweep it
// owes: after a restore it writes epochs above the item's epoch high
// (runtime), so everything tagged in [From, To] is a predecessor's.
type SweepDue struct {
	Fence     int64 // the fence of the holder taken over
	From, To  int64 // epochs
	NotBefore time.Time
}

// same reports whether two sweeps due are the same obligation (NotBefore
// compared as an instant: a read one has no monotonic reading).
func (s SweepDue) same(o SweepDue) bool {
	return s.Fence == o.Fence && s.From == o.From && s.To == o.To && s.NotBefore.Equal(o.NotBefore)
}

// Checkpoint is a committed checkpoint, as recorded in its range's item.
type Checkpoint struct {
	ID        int64  // the checkpoint (barrier) id; rises with every commit
	Key       string // the S3 key of its manifest
	Watermark int64  // the range's watermark at the barrier, ms of event time
}

// Item is one lease item of a job as read: a range, a worker slot or the
// recount lease. Fields that do not apply to its kind are zero.
type Item struct {
	Key    string
	Kind   Kind
	Exists bool // false for a slot (or the recount lease) never taken yet

	Owner     string // the holder's tenure, "<worker id>~<nonce>"; "" when free
	Worker    string // the worker part of Owner (all of it for an owner without "~")
	Counter   int64  // raised by every take, renewal and release
	Fence     int64  // the counter the current holder's take wrote (0: never taken)
	Duration  time.Duration
	RenewedAt time.Time // the holder's wall clock, for operators only
	LastOwner string
	Job       string

	// Ranges.
	Range         Range
	State         State
	HandoffTo     string // a worker that asked the holder for this range
	OwnerSwitches int64  // takes since the last committed checkpoint
	Checkpoint    Checkpoint
	EpochHigh     int64
	Origins       []Origin
	// SweepsDue are the fence sweeps owed, oldest first: one per takeover
	// whose sweep is not done yet (a holder taken over before it swept
	// passes its own obligation on with the new one).
	SweepsDue []SweepDue

	// Slots.
	Slot        int
	Address     string // the worker's API address
	ConsumerARN string // its EFO consumer
}

// ownerSep separates the worker id from a take's nonce in an owner string.
const ownerSep = "~"

// workerOf returns the worker id of an owner string: what precedes its
// last "~", or all of it (a job lease's owner, written by Acquire).
func workerOf(owner string) string {
	if i := strings.LastIndex(owner, ownerSep); i >= 0 {
		return owner[:i]
	}
	return owner
}

// Free reports whether the item is held by nobody.
func (it Item) Free() bool { return it.Owner == "" }

// RangesMap is the "<job>#ranges" item: the job's active ranges, sorted,
// covering every key group once, and a version raised by every change
// (setup, split, merge).
type RangesMap struct {
	Ranges  []Range
	Version int64
}

// Attributes of range, slot and map items, beside those of item.go.
const (
	attrFence         = "fence"          // N, the counter written by the current holder's take
	attrState         = "state"          // S, pending, active or retired; absent means active
	attrOrigins       = "origins"        // L of M, a new range's origins
	attrCheckpoint    = "checkpoint"     // N, the last committed checkpoint
	attrCheckpointKey = "checkpoint_key" // S, its manifest
	attrWatermark     = "watermark"      // N, its watermark
	attrEpochHigh     = "epoch_high"     // N, the highest epoch opened
	attrHandoffTo     = "handoff_to"     // S, a worker asking the holder for the range
	attrOwnerSwitches = "owner_switches" // N, takes since the last commit
	attrSweepDue      = "sweep_due"      // L of M, the fence sweeps owed
	attrRanges        = "ranges"         // L of S, the ranges map
	attrVersion       = "version"        // N, the ranges map's version
	attrSlot          = "slot"           // N, a slot's number
	attrAddress       = "address"        // S, a slot holder's API address
	attrConsumerARN   = "consumer_arn"   // S, a slot's EFO consumer
)

// decodeLease reads a range, slot or recount item of job at key.
func decodeLease(job, key string, av map[string]types.AttributeValue) (Item, error) {
	kind, r, slot, ok := parseKey(job, key)
	if !ok {
		return Item{}, fmt.Errorf("key %q is not a lease key of job %q", key, job)
	}
	it := Item{Key: key, Kind: kind, Range: r, Slot: slot}
	if kind == KindRange {
		it.State = StateActive
	}
	if len(av) == 0 {
		return it, nil
	}
	base, err := decodeItem(av)
	if err != nil {
		return Item{}, err
	}
	it.Exists, it.Owner, it.Counter, it.RenewedAt = true, base.owner, base.counter, base.renewedAt
	it.Worker = workerOf(it.Owner)
	it.Duration = time.Duration(base.durationMs) * time.Millisecond
	d := decoder{av: av}
	it.Fence = d.n(attrFence)
	it.LastOwner = d.s(attrLastOwner)
	it.Job = d.s(attrJob)
	it.HandoffTo = d.s(attrHandoffTo)
	it.OwnerSwitches = d.n(attrOwnerSwitches)
	it.Checkpoint = Checkpoint{ID: d.n(attrCheckpoint), Key: d.s(attrCheckpointKey), Watermark: d.n(attrWatermark)}
	it.EpochHigh = d.n(attrEpochHigh)
	it.Address = d.s(attrAddress)
	it.ConsumerARN = d.s(attrConsumerARN)
	if s := d.s(attrState); s != "" {
		it.State = State(s)
		if it.State != StatePending && it.State != StateActive && it.State != StateRetired {
			d.fail("attribute %s %q is not pending, active or retired", attrState, s)
		}
	}
	if l, ok := av[attrOrigins]; ok {
		it.Origins = d.origins(l)
	}
	if l, ok := av[attrSweepDue]; ok {
		it.SweepsDue = d.sweeps(l)
	}
	if d.err != nil {
		return Item{}, d.err
	}
	return it, nil
}

// decodeMap reads the ranges map.
func decodeMap(av map[string]types.AttributeValue) (*RangesMap, error) {
	d := decoder{av: av}
	m := &RangesMap{Version: d.n(attrVersion)}
	l, ok := av[attrRanges].(*types.AttributeValueMemberL)
	if !ok {
		return nil, fmt.Errorf("no list attribute %s", attrRanges)
	}
	for _, v := range l.Value {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return nil, fmt.Errorf("attribute %s holds a non-string", attrRanges)
		}
		r, err := ParseRange(s.Value)
		if err != nil {
			return nil, err
		}
		m.Ranges = append(m.Ranges, r)
	}
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}

// decoder reads optional attributes, keeping the first type error.
type decoder struct {
	av  map[string]types.AttributeValue
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) s(name string) string {
	v, ok := d.av[name]
	if !ok {
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		d.fail("attribute %s is not a string", name)
		return ""
	}
	return s.Value
}

func (d *decoder) n(name string) int64 {
	v, ok := d.av[name]
	if !ok {
		return 0
	}
	return d.num(name, v)
}

func (d *decoder) num(name string, v types.AttributeValue) int64 {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		d.fail("attribute %s is not a number", name)
		return 0
	}
	x, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		d.fail("attribute %s %q is not an integer", name, n.Value)
	}
	return x
}

// eachMap calls fn with a decoder of each map in the list attribute name.
func (d *decoder) eachMap(v types.AttributeValue, name string, fn func(sub *decoder)) {
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		d.fail("attribute %s is not a list", name)
		return
	}
	for _, e := range l.Value {
		m, ok := e.(*types.AttributeValueMemberM)
		if !ok {
			d.fail("attribute %s holds a non-map", name)
			return
		}
		sub := decoder{av: m.Value}
		fn(&sub)
		if sub.err != nil {
			d.fail("attribute %s: %v", name, sub.err)
			return
		}
	}
}

func (d *decoder) origins(v types.AttributeValue) []Origin {
	var out []Origin
	d.eachMap(v, attrOrigins, func(sub *decoder) {
		r, err := ParseRange(sub.s("range"))
		if err != nil {
			sub.fail("%v", err)
		}
		out = append(out, Origin{Range: r, Checkpoint: sub.n("checkpoint"), Prefix: sub.s("prefix"), EpochHigh: sub.n("epoch_high")})
	})
	if d.err != nil {
		return nil
	}
	return out
}

func (d *decoder) sweeps(v types.AttributeValue) []SweepDue {
	var out []SweepDue
	d.eachMap(v, attrSweepDue, func(sub *decoder) {
		s := SweepDue{Fence: sub.n("fence"), From: sub.n("from"), To: sub.n("to")}
		if t := sub.s("not_before"); t != "" {
			at, err := time.Parse(time.RFC3339Nano, t)
			if err != nil {
				sub.fail("not_before %q is not an RFC 3339 time", t)
			}
			s.NotBefore = at
		}
		out = append(out, s)
	})
	if d.err != nil {
		return nil
	}
	return out
}

func avL(vs []types.AttributeValue) types.AttributeValue {
	return &types.AttributeValueMemberL{Value: vs}
}

func avM(m map[string]types.AttributeValue) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: m}
}

func rangesValue(rs []Range) types.AttributeValue {
	l := make([]types.AttributeValue, len(rs))
	for i, r := range rs {
		l[i] = avS(rangeText(r))
	}
	return avL(l)
}

func originsValue(os []Origin) types.AttributeValue {
	l := make([]types.AttributeValue, len(os))
	for i, o := range os {
		l[i] = avM(map[string]types.AttributeValue{
			"range": avS(rangeText(o.Range)), "checkpoint": avN(o.Checkpoint), "prefix": avS(o.Prefix), "epoch_high": avN(o.EpochHigh),
		})
	}
	return avL(l)
}

func sweepsValue(ss []SweepDue) types.AttributeValue {
	l := make([]types.AttributeValue, len(ss))
	for i, s := range ss {
		l[i] = avM(map[string]types.AttributeValue{
			"fence": avN(s.Fence), "from": avN(s.From), "to": avN(s.To), "not_before": wallString(s.NotBefore),
		})
	}
	return avL(l)
}

// sortItems orders items by key.
func sortItems(its []Item) {
	slices.SortFunc(its, func(a, b Item) int { return strings.Compare(a.Key, b.Key) })
}
