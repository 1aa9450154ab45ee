package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// API is the part of the DynamoDB client the lease uses: consistent reads
// and conditional updates of lease items, and CreateTable. *dynamodb.Client
// implements it, and so does Mem.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// ErrLost is wrapped by every error Check returns, and by the error Run
// returns when the lease was taken over or could not be renewed in time:
// the holder must not write as the job any more. Match it with errors.Is.
var ErrLost = errors.New("lease: lost")

// HeldError is Acquire's answer when another owner holds the lease and is
// alive: its counter moved while this process watched it, or it wrote the
// lease between this process's read and its conditional write. Match it
// with errors.As.
type HeldError struct {
	Key   string // the lease key, "<job>#kg<from>-<to>"
	Owner string // the holder ("" if it released the lease meanwhile)
	// Counter is the holder's counter as last read.
	Counter int64
	// RenewedAt is the holder's own wall-clock time of its last write
	// (renewed_at): for operators only, never used for a decision; zero if
	// unknown.
	RenewedAt time.Time
	// Watched is how long the counter was watched (zero when the holder
	// won a race for the write instead).
	Watched time.Duration
}

func (e *HeldError) Error() string {
	at := "unknown"
	if !e.RenewedAt.IsZero() {
		at = e.RenewedAt.UTC().Format(time.RFC3339)
	}
	how := "took it as this process tried to"
	if e.Watched > 0 {
		how = "renewed it within the last " + e.Watched.String()
	}
	return fmt.Sprintf("lease: %s is held by %s, which %s (counter %d, its clock says renewed at %s): another process is running this job; stop it first, or give this one another job name",
		e.Key, e.Owner, how, e.Counter, at)
}

// Lease is one held lease: the right to write as one job (one key-group
// range of it). Acquire returns it; Run keeps it; Check tells whether it
// may still be written under; Release gives it up. Its methods are safe for
// concurrent use; Run may run once at a time.
type Lease struct {
	api API
	o   Options
	key string
	m   *metrics
	log *slog.Logger

	// op serialises this holder's writes (renewals, Release), so that two
	// of them never race each other for the same counter.
	op      sync.Mutex
	running atomic.Bool

	mu        sync.Mutex
	counter   int64         // the counter of this holder's last write
	validFrom time.Duration // Clock.Now before sending the last successful write
	err       error         // set once lost or released: what Check returns from then on
	taken     bool          // lost to another owner: Release has nothing to give up
	released  bool          // Release succeeded
	lastWarn  time.Duration // when a failed renewal was last logged (0: never)

	// ended is cancelled, with err as its cause, when the lease is lost or
	// released; Guard's contexts and Run's sleep end with it.
	ended    context.Context
	endCause context.CancelCauseFunc
}

// Acquire takes the lease of o's job and key-group range, following the
// Kinesis Client Library's rule:
//   - it reads the lease item (a consistent read);
//   - if there is none, or it was released, it takes it with a conditional
//     write on the counter it read;
//   - if another owner holds it, it watches the item for one lease
//     duration (Options.Duration, or the holder's own, if longer) on its
//     own monotonic clock, and reads it again. If the counter moved, the
//     holder is alive and Acquire returns a *HeldError. If it did not, the
//     holder stopped renewing (it died or lost its connection) and Acquire
//     takes the lease over: counter == the one observed → counter+1, owner
//     = this process;
//   - a conditional write refused because another process wrote the item
//     first returns a *HeldError too (the winner is alive: it just wrote).
//
// No two clocks are ever compared: the holder times its renewals, and the
// taker its watch, each on its own clock. Acquire may therefore block for
// one lease duration; ctx ends the wait. The returned Lease passes Check;
// start Run at once to keep it.
func Acquire(ctx context.Context, api API, o Options) (*Lease, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	key := o.Key()
	m, err := newMetrics(o.Registerer, key)
	if err != nil {
		return nil, err
	}
	ended, endCause := context.WithCancelCause(context.Background())
	// Every call is bounded below the renewal period (callTimeout).
	l := &Lease{api: timed{api: api, d: callTimeout(o.Duration)}, o: o, key: key, m: m, log: o.Logger.With("lease", key, "owner", o.Owner),
		ended: ended, endCause: endCause}
	ok := false
	defer func() {
		if !ok {
			endCause(errors.New("lease: not acquired"))
		}
	}()
	if err := l.refuseFleet(ctx); err != nil {
		return nil, err
	}
	cur, err := l.read(ctx)
	if err != nil {
		return nil, err
	}
	takeover := false
	if !cur.free() {
		watched := cur
		watch := max(o.Duration, time.Duration(cur.durationMs)*time.Millisecond)
		l.log.Info("lease is held: watching its counter for one lease duration to see whether the holder is alive",
			"holder", cur.owner, "counter", cur.counter, "watch", watch)
		if err := o.Clock.Sleep(ctx, watch); err != nil {
			return nil, fmt.Errorf("lease: acquire %s: watching the holder %s: %w", key, cur.owner, err)
		}
		if cur, err = l.read(ctx); err != nil {
			return nil, err
		}
		if !cur.free() {
			if cur.counter != watched.counter || cur.owner != watched.owner {
				return nil, l.held(cur, watch)
			}
			takeover = true
		}
	}
	if err := l.take(ctx, cur, takeover); err != nil {
		return nil, err
	}
	ok = true
	return l, nil
}

// held returns the *HeldError for cur.
func (l *Lease) held(cur item, watched time.Duration) error {
	return &HeldError{Key: l.key, Owner: cur.owner, Counter: cur.counter, RenewedAt: cur.renewedAt, Watched: watched}
}

// maxTakeAttempts bounds the claims of a lease that is found free again
// after a lost race (a winner that released it at once).
const maxTakeAttempts = 3

// take writes this owner into the lease read as cur: a new item, a
// released one, or (takeover) one whose holder was watched and found dead.
func (l *Lease) take(ctx context.Context, cur item, takeover bool) error {
	for attempt := 1; ; attempt++ {
		var in *dynamodb.UpdateItemInput
		next := cur.counter + 1
		switch {
		case takeover:
			in = l.update(condHeld, updTakeover, l.takeValues(cur.counter, next, cur.owner))
		case !cur.exists:
			in = l.update(condCreate, updTake, l.takeValues(0, next, ""))
		default:
			in = l.update(condFree, updTake, l.takeValues(cur.counter, next, ""))
		}
		sent := l.o.Clock.Now()
		_, err := l.api.UpdateItem(ctx, in)
		if err == nil {
			l.mu.Lock()
			l.counter, l.validFrom = next, sent
			l.mu.Unlock()
			if takeover {
				l.m.takeovers.Inc()
				l.log.Warn("lease taken over: its holder did not renew it for one lease duration", "holder", cur.owner, "counter", next)
			} else {
				l.log.Info("lease acquired", "counter", next)
			}
			return nil
		}
		refused := isRefused(err)
		// Either another process wrote the item first, or this one did: an
		// earlier attempt (the SDK's retry of a request whose answer was
		// lost) or a request that failed here but was applied. Only a read
		// tells.
		now, rerr := l.read(ctx)
		if rerr != nil {
			if refused {
				return rerr
			}
			return fmt.Errorf("lease: take %s: %w", l.key, err)
		}
		if now.owner == l.o.Owner {
			return l.adopt(ctx, now)
		}
		if !refused {
			return fmt.Errorf("lease: take %s: %w", l.key, err)
		}
		if now.free() && attempt < maxTakeAttempts {
			cur, takeover = now, false
			continue
		}
		return l.held(now, 0)
	}
}

// adopt makes this holder's own write, found applied (owner == this owner)
// although its answer was lost, the current state, and confirms it with a
// renewal: validity is only ever counted from a write seen to succeed.
func (l *Lease) adopt(ctx context.Context, now item) error {
	l.mu.Lock()
	l.counter = now.counter
	l.mu.Unlock()
	if err := l.write(ctx, "take"); err != nil {
		return fmt.Errorf("lease: take %s: confirming a write whose answer was lost: %w", l.key, err)
	}
	l.log.Info("lease acquired", "counter", l.Counter())
	return nil
}

// read returns the lease item (a consistent read).
func (l *Lease) read(ctx context.Context) (item, error) {
	out, err := l.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(l.o.Table),
		Key:            map[string]types.AttributeValue{attrKey: avS(l.key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return item{}, fmt.Errorf("lease: read %s: %w", l.key, err)
	}
	it, err := decodeItem(out.Item)
	if err != nil {
		return item{}, fmt.Errorf("lease: read %s in table %s: malformed item: %w", l.key, l.o.Table, err)
	}
	return it, nil
}

// refuseFleet refuses a job whose key groups are cut into ranges (adclick
// setup --ranges): its workers hold range leases, one of which may be this
// very item, and a single process beside them would count the same ads.
func (l *Lease) refuseFleet(ctx context.Context) error {
	key := RangesKey(l.o.Job)
	out, err := l.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.o.Table),
		Key: map[string]types.AttributeValue{attrKey: avS(key)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("lease: read %s: %w", key, err)
	}
	if out.Item != nil {
		return fmt.Errorf("lease: job %s is a fleet (its key-group ranges are set up in %s): run its workers with --fleet, or give this process another job name", l.o.Job, l.o.Table)
	}
	return nil
}

func isRefused(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// validity is how long after the last successful renewal (its send time)
// Check passes: 2/3 of the lease duration. See the package documentation.
func (l *Lease) validity() time.Duration { return 2 * l.o.Duration / 3 }

// renewEvery is the renewal period, Duration/3: two renewals per validity,
// so one failed renewal (retried) does not let the lease lapse.
func (l *Lease) renewEvery() time.Duration { return l.o.Duration / 3 }

// retryEvery is the wait after a failed renewal: about ten retries fit in
// the validity left after a failed regular renewal.
func (l *Lease) retryEvery() time.Duration { return max(l.o.Duration/30, time.Millisecond) }

// Check reports whether this process may still write as the job: nil while
// the last successful renewal (timed on the monotonic clock from when it
// was sent) is less than 2/3 of the lease duration old and the lease has
// been neither lost nor released; otherwise an error wrapping ErrLost.
// Every sink write batch and the flush call it before writing; it does no
// I/O and is cheap.
//
// Why 2/3: a taker declares the holder dead only after watching the counter
// not move for a full lease duration D, and it can only have read the
// counter after the holder's last successful renewal was sent. So from the
// moment this holder's Check starts failing (2D/3 after that send) to the
// earliest takeover (D after it) at least D/3 passes, during which this
// holder starts no write. What Check cannot stop is a write that passed it
// just before: run every write under Guard, whose context Run cancels the
// moment the lease lapses (each renewal attempt is bounded by the validity
// left), so that no retry or backoff of a sink outlives it; what remains is
// the one request already on the wire, bounded by the time DynamoDB (or S3,
// Valkey) takes to process it: milliseconds, far below D/3 (10 s by
// default). The same margin covers the two machines' clocks running at
// different rates: only a holder's clock running a third slower than the
// taker's would use it up. A process paused for longer than D/3 between
// Check and sending its request (a stopped VM, a swap storm) is not
// covered: only a condition on the written item itself could cover that.
func (l *Lease) Check() error {
	now := l.o.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	return checkValidity(l.key, now, l.validFrom, l.validity())
}

// checkValidity returns nil while a lease last renewed at validFrom is
// valid at now, and the ErrLost error of key once it is not.
func checkValidity(key string, now, validFrom, validity time.Duration) error {
	if age := now - validFrom; age >= validity {
		return fmt.Errorf("lease: %s not renewed for %v (valid for %v after a renewal): %w", key, age, validity, ErrLost)
	}
	return nil
}

// guardUntil derives from ctx a context that is also cancelled, with
// ended's cause, once ended ends; cancel it when the write is done.
func guardUntil(ctx, ended context.Context) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(ended, func() { cancel(context.Cause(ended)) })
	return gctx, func() { stop(); cancel(context.Canceled) }
}

// Guard returns a context derived from ctx that is also cancelled, with
// the ErrLost error as its cause, once the lease is lost (taken over, or
// not renewed within its validity, as Run finds) or released. Run each
// write under it, so that no write, retry or backoff outlives the lease.
// Call cancel when the write is done.
func (l *Lease) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	return guardUntil(ctx, l.ended)
}

// Lost returns a channel that is closed once the lease is lost or
// released; Check then returns the reason.
func (l *Lease) Lost() <-chan struct{} { return l.ended.Done() }

// Counter returns the counter of this holder's last successful write.
func (l *Lease) Counter() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counter
}

// Key returns the lease key, "<job>#kg<from>-<to>".
func (l *Lease) Key() string { return l.key }

// Owner returns this holder's owner string.
func (l *Lease) Owner() string { return l.o.Owner }

// end records why the lease can no longer be written under (the first
// reason wins) and returns the reason in effect.
func (l *Lease) end(err error, taken bool) error {
	l.mu.Lock()
	if l.err == nil {
		l.err, l.taken = err, taken
		if !errors.Is(err, errReleased) {
			l.m.lost.Inc()
		}
	}
	err = l.err
	l.mu.Unlock()
	l.endCause(err)
	return err
}

// errReleased is wrapped by Check's error after Release.
var errReleased = errors.New("released")

// Run renews the lease every Duration/3 until ctx is done or the lease is
// released (it then returns nil), or the lease is lost: a renewal is
// conditional on this owner and its counter, and a refused one means
// another process took the lease over; no renewal succeeding within the
// validity (2/3 of the duration after the last good one) means it may be
// taken over. Run then returns an error wrapping ErrLost, and the lease is
// lost for good: stop writing and exit (a restart acquires it again).
// Failed renewals (throttling, timeouts, a DynamoDB outage) are retried
// every Duration/30 within that budget, each bounded by the validity left.
func (l *Lease) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return fmt.Errorf("lease: %s: Run is already running", l.key)
	}
	defer l.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.ended, cancel)
	defer stop()
	for {
		l.mu.Lock()
		next, err := l.validFrom+l.renewEvery(), l.err
		l.mu.Unlock()
		if err != nil {
			return runResult(err)
		}
		if err := l.o.Clock.Sleep(ctx, next-l.o.Clock.Now()); err != nil {
			return runResult(l.errOrNil())
		}
		if err := l.renew(ctx); err != nil {
			return runResult(err)
		}
		if ctx.Err() != nil {
			return runResult(l.errOrNil())
		}
	}
}

// runResult maps the reason the lease ended to Run's result: nil for a
// release or no reason.
func runResult(err error) error {
	if err == nil || errors.Is(err, errReleased) {
		return nil
	}
	return err
}

func (l *Lease) errOrNil() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// renew renews the lease once, retrying failures within the validity. It
// returns nil on success or when ctx ends, and the lease's end reason when
// it is lost or released.
func (l *Lease) renew(ctx context.Context) error {
	for {
		err := l.write(ctx, "renew")
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if ended := l.errOrNil(); ended != nil {
			return ended
		}
		l.m.failures.Inc()
		now := l.o.Clock.Now()
		l.mu.Lock()
		left := l.validFrom + l.validity() - now
		warn := l.lastWarn == 0 || now-l.lastWarn >= l.renewEvery()
		if warn {
			l.lastWarn = now
		}
		l.mu.Unlock()
		if left <= 0 {
			return l.expire(ctx, err)
		}
		if warn {
			l.log.Warn("lease renewal failed; retrying", "valid_for", left, "err", err)
		}
		if err := l.o.Clock.Sleep(ctx, min(l.retryEvery(), left)); err != nil {
			return nil
		}
	}
}

// expire ends a lease whose validity passed without a successful renewal
// (the last attempt failing with lastErr). A read tells, for the record and
// for Release, whether another process has taken it over meanwhile.
func (l *Lease) expire(ctx context.Context, lastErr error) error {
	rctx, cancel := context.WithTimeout(ctx, l.renewEvery())
	defer cancel()
	if cur, err := l.read(rctx); err == nil && cur.owner != "" && cur.owner != l.o.Owner {
		return l.takenOver(cur)
	}
	l.log.Error("lease lost: no renewal succeeded within its validity; stop writing", "validity", l.validity(), "err", lastErr)
	return l.end(fmt.Errorf("lease: %s: no renewal succeeded within %v, the last failing with: %v: %w", l.key, l.validity(), lastErr, ErrLost), false)
}

// takenOver ends the lease, found held by cur.owner.
func (l *Lease) takenOver(cur item) error {
	by := cur.owner
	if by == "" {
		by = "nobody (released by an operator?)"
	}
	l.log.Error("lease lost: another process took it over; stop writing", "holder", cur.owner, "counter", cur.counter)
	return l.end(fmt.Errorf("lease: %s taken over by %s (counter %d, this holder's was %d): %w", l.key, by, cur.counter, l.Counter(), ErrLost), true)
}

// maxAdopt bounds how often one renewal adopts its own earlier writes.
const maxAdopt = 3

// write sends one renewal (op "renew", or "take" to confirm an adopted
// take), conditional on this owner and its counter; a renewal's request is
// bounded by the validity left (a take being confirmed has none yet). A
// refused renewal is either a takeover (the lease is lost: end) or this
// holder's own earlier write applied although its answer was lost (owner
// still this one: adopt its counter and renew again).
func (l *Lease) write(ctx context.Context, op string) error {
	l.op.Lock()
	defer l.op.Unlock()
	for adopted := 0; ; adopted++ {
		l.mu.Lock()
		c, validFrom, ended := l.counter, l.validFrom, l.err
		l.mu.Unlock()
		if ended != nil {
			return ended
		}
		sent := l.o.Clock.Now()
		actx, cancel := ctx, context.CancelFunc(func() {})
		if op == "renew" {
			left := validFrom + l.validity() - sent
			if left <= 0 {
				return fmt.Errorf("lease: renew %s: validity already over", l.key)
			}
			actx, cancel = context.WithTimeout(ctx, left)
		}
		in := l.update(condHeld, updRenew, map[string]types.AttributeValue{
			":o": avS(l.o.Owner), ":c": avN(c), ":n": avN(c + 1),
			":r": wallString(l.o.Clock.Wall()), ":d": avN(l.o.Duration.Milliseconds()),
		})
		_, err := l.api.UpdateItem(actx, in)
		cancel()
		if err == nil {
			l.mu.Lock()
			l.counter, l.validFrom = c+1, sent
			l.mu.Unlock()
			if op == "renew" {
				l.m.renewals.Inc()
			}
			return nil
		}
		if !isRefused(err) {
			return fmt.Errorf("lease: %s %s: %w", op, l.key, err)
		}
		cur, rerr := l.read(ctx)
		if rerr != nil {
			return fmt.Errorf("lease: %s %s: refused, and the item cannot be read: %w", op, l.key, rerr)
		}
		if cur.owner == l.o.Owner && adopted < maxAdopt {
			l.mu.Lock()
			l.counter = cur.counter
			l.mu.Unlock()
			continue
		}
		if cur.owner == l.o.Owner {
			return fmt.Errorf("lease: %s %s: the counter keeps moving under this owner", op, l.key)
		}
		return l.takenOver(cur)
	}
}

// Release gives the lease up at once (conditional on this owner and its
// counter), so that the next Acquire takes it without watching. Call it
// on a clean stop, after the last write: from the moment it is called,
// Check fails and Run returns. A lease already taken over has nothing to
// release (nil). If the write fails, the lease is left to expire: the next
// Acquire then waits one lease duration.
func (l *Lease) Release(ctx context.Context) error {
	l.end(fmt.Errorf("lease: %s %w by this process: %w", l.key, errReleased, ErrLost), false)
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	done := l.taken || l.released
	l.mu.Unlock()
	if done {
		return nil
	}
	for adopted := 0; ; adopted++ {
		c := l.Counter()
		_, err := l.api.UpdateItem(ctx, l.update(condHeld, updRelease, map[string]types.AttributeValue{
			":o": avS(l.o.Owner), ":me": avS(l.o.Owner), ":c": avN(c), ":n": avN(c + 1), ":r": wallString(l.o.Clock.Wall()),
		}))
		if err == nil {
			l.mu.Lock()
			l.counter, l.released = c+1, true
			l.mu.Unlock()
			l.log.Info("lease released", "counter", c+1)
			return nil
		}
		if !isRefused(err) {
			return fmt.Errorf("lease: release %s: %w", l.key, err)
		}
		cur, rerr := l.read(ctx)
		if rerr != nil {
			return fmt.Errorf("lease: release %s: refused, and the item cannot be read: %w", l.key, rerr)
		}
		switch {
		case cur.owner == l.o.Owner && adopted < maxAdopt:
			l.mu.Lock()
			l.counter = cur.counter
			l.mu.Unlock()
		case cur.owner == "":
			l.mu.Lock()
			l.released = true // by an earlier attempt whose answer was lost
			l.mu.Unlock()
			return nil
		default:
			return fmt.Errorf("lease: release %s: taken over by %s: %w", l.key, cur.owner, ErrLost)
		}
	}
}
