package lease

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/lease/leasetest"
)

// The property test of range leases: several workers, each a goroutine
// running a worker's loop (scan, balance, take, ask, hand off, renew,
// checkpoint, split) against one Mem, in simulated time. Each worker
// process has its own clock, running at its own rate within the note's
// bound, and its own network: latency, slow requests, requests lost,
// answers lost, requests applied long after the caller gave up, and fault
// windows of each kind; processes pause, crash, stop cleanly, and are
// replaced while the old process is cut off (a zombie with the same worker
// id). A deterministic scheduler runs one goroutine at a time, so a seed
// replays exactly.
//
// At every instant something happens, every claim of every process, dead
// or alive, is asked Check: no two passing claims may cover a key group or
// a slot at once, and a passing claim must be what the table says (its
// owner and fence). Every write applied is checked too: counters,
// checkpoints and epoch high-water marks never go back, the fence of every
// take rises per key group (across splits), and a write conditioned on a
// fence lands only on an item of that fence.

var (
	simSeed = flag.Uint64("lease.seed", 0, "run the range-lease simulation with this seed only (0: the usual seeds)")
	simRuns = flag.Int("lease.runs", 12, "number of seeds the range-lease simulation runs")
)

func TestRangeLeaseProperty(t *testing.T) {
	seeds := make([]uint64, 0, *simRuns)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for i := range *simRuns {
			seeds = append(seeds, uint64(1000+i))
		}
	}
	var total simStats
	for _, seed := range seeds {
		st, err := runSim(seed, defaultSimConfig())
		if err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./lease/ -run TestRangeLeaseProperty -v -args -lease.seed=%d", seed, err, seed)
		}
		total.add(st)
	}
	t.Logf("%d seeds: %s", len(seeds), total)
	if *simSeed != 0 {
		return
	}
	// The runs must have exercised what they are there to check.
	for what, n := range map[string]int{
		"takeovers": total.takes["takeover"], "handoffs": total.handoffs, "lapsed reservations taken": total.takes["lapsed"],
		"lapsed requests removed": total.cancels, "splits": total.splits, "activations": total.activations,
		"refused takes": total.refused, "claims lost": total.lost, "crashes": total.crashes, "zombies": total.zombies,
		"clean stops": total.stops, "late applies": total.late, "lost answers": total.lostAnswers,
	} {
		if n == 0 {
			t.Errorf("no %s in %d seeds: the simulation does not exercise them", what, len(seeds))
		}
	}
}

// The checker itself: with clocks further apart than the note's bound (a
// holder's clock running at half the taker's rate), the margin of D/3 is
// gone, and the simulation must find two holders at once.
func TestRangeLeasePropertyFindsClockSkew(t *testing.T) {
	cfg := defaultSimConfig()
	cfg.minRate, cfg.maxRate = 0.5, 1.5
	for seed := uint64(1); seed <= 40; seed++ {
		if _, err := runSim(seed, cfg); err != nil {
			if !strings.Contains(err.Error(), "pass Check at once") && !strings.Contains(err.Error(), "the table says") {
				t.Fatalf("seed %d: %v, want two holders at once", seed, err)
			}
			t.Logf("seed %d: found as expected: %v", seed, err)
			return
		}
	}
	t.Fatal("40 seeds with clocks up to 3 times apart found no overlap: the checker cannot see one")
}

type simConfig struct {
	workers          int           // worker ids
	ranges           int           // at setup
	slots            int           // --max-workers
	length           time.Duration // simulated time
	minRate, maxRate float64       // clock rates
}

// defaultSimConfig keeps clock rates within the note's bound: the margin
// D/3 covers a holder's clock running up to a third slower than a
// taker's, here at most 1.15/0.87 ≈ 1.32 apart.
func defaultSimConfig() simConfig {
	return simConfig{workers: 4, ranges: 8, slots: 6, length: 15 * time.Minute, minRate: 0.87, maxRate: 1.15}
}

type simStats struct {
	takes                                  map[string]int
	handoffs, cancels, splits, activations int
	refused, lost, crashes, zombies, stops int
	late, lostAnswers, events              int
}

func (s *simStats) add(o simStats) {
	if s.takes == nil {
		s.takes = map[string]int{}
	}
	for k, v := range o.takes {
		s.takes[k] += v
	}
	s.handoffs += o.handoffs
	s.cancels += o.cancels
	s.splits += o.splits
	s.activations += o.activations
	s.refused += o.refused
	s.lost += o.lost
	s.crashes += o.crashes
	s.zombies += o.zombies
	s.stops += o.stops
	s.late += o.late
	s.lostAnswers += o.lostAnswers
	s.events += o.events
}

func (s simStats) String() string {
	return fmt.Sprintf("takes %v, handoffs %d, cancels %d, splits %d, activations %d, refused takes %d, claims lost %d, crashes %d, zombies %d, clean stops %d, late applies %d, lost answers %d, events %d",
		s.takes, s.handoffs, s.cancels, s.splits, s.activations, s.refused, s.lost, s.crashes, s.zombies, s.stops, s.late, s.lostAnswers, s.events)
}

// --- the scheduler ---

type simEvent struct {
	at   time.Duration
	seq  int
	wake chan struct{} // a parked goroutine to resume, or
	fn   func()        // something the scheduler does itself (a request applied late)
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simWorld is simulated time: goroutines park on it and the scheduler
// resumes them one at a time in time order, so only one ever runs.
type simWorld struct {
	now      time.Duration
	seq      int
	q        simQueue
	yield    chan struct{}
	stopping bool
	rng      *rand.Rand
}

func (s *simWorld) push(at time.Duration, wake chan struct{}, fn func()) {
	s.seq++
	heap.Push(&s.q, &simEvent{at: max(at, s.now), seq: s.seq, wake: wake, fn: fn})
}

// park suspends the calling simulated goroutine until time at.
func (s *simWorld) park(at time.Duration) {
	ch := make(chan struct{})
	s.push(at, ch, nil)
	s.yield <- struct{}{}
	<-ch
}

// spawn starts fn as a simulated goroutine at time at.
func (s *simWorld) spawn(at time.Duration, fn func()) {
	ch := make(chan struct{})
	s.push(at, ch, nil)
	go func() {
		<-ch
		fn()
		s.yield <- struct{}{}
	}()
}

// run resumes goroutines in time order until until, calling check at every
// instant something happened; it stops at check's first error.
func (s *simWorld) run(until time.Duration, check func() error) (int, error) {
	events := 0
	for s.q.Len() > 0 && s.q[0].at <= until {
		e := heap.Pop(&s.q).(*simEvent)
		s.now = e.at
		if e.fn != nil {
			e.fn()
		} else {
			close(e.wake)
			<-s.yield
		}
		events++
		if err := check(); err != nil {
			return events, err
		}
	}
	return events, nil
}

// drain ends every simulated goroutine: from now on every park returns at
// once and the workers see stopping.
func (s *simWorld) drain() {
	s.stopping = true
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*simEvent)
		s.now = max(s.now, e.at)
		if e.fn == nil {
			close(e.wake)
			<-s.yield
		}
	}
}

// simClock is one process's clock: its own rate and origin.
type simClock struct {
	s      *simWorld
	rate   float64
	offset time.Duration
}

func (c *simClock) Now() time.Duration { return c.offset + time.Duration(float64(c.s.now)*c.rate) }
func (c *simClock) Wall() time.Time    { return wallOrigin.Add(c.Now()) }

// Sleep parks for d of this clock.
func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleep(d)
	return ctx.Err()
}

func (c *simClock) sleep(d time.Duration) {
	if d <= 0 || c.s.stopping {
		return
	}
	c.s.park(c.s.now + time.Duration(math.Ceil(float64(d)/c.rate)))
}

// --- the network ---

type netMode int

const (
	netOK       netMode = iota
	netDrop             // the request is lost; the caller times out
	netLose             // applied, the answer lost; the caller times out
	netLate             // applied long after the caller timed out
	netSlow             // slow both ways, and answered
	netPaused           // applied, then the caller is paused before it sees the answer
	netVerySlow         // delayed for longer than D/3 in flight, and answered
	netFlaky            // a window of some requests lost, some very slow, some fine
)

type netWindow struct {
	from, to time.Duration
	mode     netMode
}

// simNet is one process's network: fault windows and per-request faults.
type simNet struct {
	windows []netWindow
}

func newSimNet(s *simWorld, start, end time.Duration) *simNet {
	n := &simNet{}
	for at := start; at < end; {
		at += time.Duration(s.rng.ExpFloat64() * float64(3*time.Minute))
		dur := 3*time.Second + time.Duration(s.rng.Float64()*float64(50*time.Second))
		mode := []netMode{netDrop, netLose, netLate, netSlow, netVerySlow, netFlaky}[s.rng.IntN(6)]
		n.windows = append(n.windows, netWindow{at, at + dur, mode})
		at += dur
	}
	return n
}

func (n *simNet) mode(s *simWorld) netMode {
	for _, w := range n.windows {
		if w.from <= s.now && s.now < w.to {
			if w.mode != netFlaky {
				return w.mode
			}
			switch r := s.rng.Float64(); {
			case r < 0.4:
				return netDrop
			case r < 0.7:
				return netVerySlow
			}
			return netOK
		}
	}
	switch r := s.rng.Float64(); {
	case r < 0.005:
		return netDrop
	case r < 0.010:
		return netLose
	case r < 0.013:
		return netLate
	case r < 0.023:
		return netSlow
	case r < 0.026:
		return netPaused
	case r < 0.029:
		return netVerySlow
	}
	return netOK
}

const simTimeout = 2 * time.Second // a client's request timeout

var errSimStopped = errors.New("simulation stopped")

// simAPI is one process's view of the shared Mem, through its network.
type simAPI struct {
	sim *sim
	net *simNet
}

var _ RangeAPI = (*simAPI)(nil)

func (a *simAPI) latency() time.Duration {
	return time.Duration(a.sim.w.rng.ExpFloat64() * float64(4*time.Millisecond))
}

// call sends one request: apply runs when (and if) it reaches the table;
// it returns the error the caller sees.
func (a *simAPI) call(write bool, apply func()) error {
	s := a.sim.w
	if s.stopping {
		return errSimStopped
	}
	mode := a.net.mode(s)
	if !write && (mode == netLate || mode == netLose) {
		mode = netDrop
	}
	switch mode {
	case netDrop:
		s.park(s.now + simTimeout)
		return errTransient
	case netLate:
		a.sim.stats.late++
		s.push(s.now+simTimeout+time.Duration(s.rng.Float64()*float64(60*time.Second)), nil, apply)
		s.park(s.now + simTimeout)
		return errTransient
	}
	d1, d2 := a.latency(), a.latency()
	switch mode {
	case netOK:
		// Applied on arrival at once; the latency is all on the way back.
		// (One event instead of two; the other modes delay the request
		// itself.)
		d1, d2 = 0, d1+d2
	case netSlow:
		d1 += time.Duration(s.rng.Float64() * float64(4*time.Second))
		d2 += time.Duration(s.rng.Float64() * float64(4*time.Second))
	case netVerySlow:
		d1 += 10*time.Second + time.Duration(s.rng.Float64()*float64(30*time.Second))
	case netPaused:
		d2 += 5*time.Second + time.Duration(s.rng.Float64()*float64(40*time.Second))
	}
	if d1 > 0 {
		s.park(s.now + d1)
		if s.stopping {
			return errSimStopped
		}
	}
	apply()
	if mode == netLose {
		a.sim.stats.lostAnswers++
		s.park(s.now + simTimeout)
		return errTransient
	}
	s.park(s.now + d2)
	return nil
}

func (a *simAPI) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	var out *dynamodb.GetItemOutput
	var err error
	if cerr := a.call(false, func() { out, err = a.sim.mem.GetItem(context.Background(), in) }); cerr != nil {
		return nil, cerr
	}
	return out, err
}

func (a *simAPI) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	var out *dynamodb.ScanOutput
	var err error
	in = copyScan(in) // the caller changes ExclusiveStartKey for the next page
	if cerr := a.call(false, func() { out, err = a.sim.mem.Scan(context.Background(), in) }); cerr != nil {
		return nil, cerr
	}
	return out, err
}

func copyScan(in *dynamodb.ScanInput) *dynamodb.ScanInput {
	c := *in
	return &c
}

func (a *simAPI) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	var out *dynamodb.UpdateItemOutput
	var err error
	if cerr := a.call(true, func() { out, err = a.sim.update(in) }); cerr != nil {
		return nil, cerr
	}
	return out, err
}

func (a *simAPI) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return a.sim.mem.CreateTable(ctx, in, o...)
}

func (a *simAPI) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return a.sim.mem.DescribeTable(ctx, in, o...)
}

// --- the simulation and its checks ---

type sim struct {
	seed      uint64
	cfg       simConfig
	w         *simWorld
	mem       *leasetest.Mem
	procs     []*simProc      // every process ever started
	items     map[string]Item // the table as it is, kept by update
	fences    map[string]int64
	violation error
	stats     simStats
}

// read reads an item of the table as it is now (no network).
func (s *sim) read(key string) Item {
	out, err := s.mem.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS(key)}})
	if err != nil {
		panic(err)
	}
	it, err := decodeLease(testJob, key, out.Item)
	if err != nil {
		panic(err)
	}
	return it
}

// peek returns an item as it is now: every write after setup goes
// through update, which keeps items.
func (s *sim) peek(key string) Item {
	if it, ok := s.items[key]; ok {
		return it
	}
	it := s.read(key)
	s.items[key] = it
	return it
}

func (s *sim) fail(format string, args ...any) {
	if s.violation == nil {
		s.violation = fmt.Errorf("at %v: %s", s.w.now, fmt.Sprintf(format, args...))
	}
}

// update applies a write to the table and checks what it did.
func (s *sim) update(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	key := in.Key[attrKey].(*types.AttributeValueMemberS).Value
	if key == RangesKey(testJob) {
		return s.mem.UpdateItem(context.Background(), in)
	}
	before := s.peek(key)
	out, err := s.mem.UpdateItem(context.Background(), in)
	if err != nil {
		return out, err
	}
	after := s.read(key)
	s.items[key] = after
	if before.Exists {
		if after.Counter < before.Counter {
			s.fail("the counter of %s went back from %d to %d", key, before.Counter, after.Counter)
		}
		if after.Checkpoint.ID < before.Checkpoint.ID || after.EpochHigh < before.EpochHigh {
			s.fail("%s went back: checkpoint %d → %d, epoch_high %d → %d", key, before.Checkpoint.ID, after.Checkpoint.ID, before.EpochHigh, after.EpochHigh)
		}
	}
	if after.Fence != before.Fence {
		if after.Fence != after.Counter || after.Owner == "" {
			s.fail("a take of %s left fence %d, counter %d, owner %q", key, after.Fence, after.Counter, after.Owner)
		}
		var units []string
		if after.Kind == KindRange {
			for kg := after.Range.From; kg < after.Range.To; kg++ {
				units = append(units, fmt.Sprintf("kg%d", kg))
			}
		} else {
			units = []string{key}
		}
		for _, u := range units {
			if after.Fence <= s.fences[u] {
				s.fail("a take of %s wrote fence %d, not above %d, the last fence of %s", key, after.Fence, s.fences[u], u)
			}
			s.fences[u] = after.Fence
		}
	}
	if fe, ok := in.ExpressionAttributeValues[":fe"]; ok {
		f := fe.(*types.AttributeValueMemberN).Value
		me := in.ExpressionAttributeValues[":me"].(*types.AttributeValueMemberS).Value
		if fmt.Sprint(after.Fence) != f || after.Owner != me && after.LastOwner != me {
			s.fail("a write of %s fenced by %s (%s) landed on fence %d, owner %q", key, f, me, after.Fence, after.Owner)
		}
	}
	return out, err
}

// check runs at every instant: claims that pass Check must hold what the
// table says, and no two may cover one key group or slot.
func (s *sim) check() error {
	if s.violation != nil {
		return s.violation
	}
	var passing []*Claim
	for _, p := range s.procs {
		live := p.claims[:0]
		for _, c := range p.claims {
			if c.errOrNil() != nil {
				continue // ended for good
			}
			if c.Check() == nil {
				passing = append(passing, c)
			} else if p.exited {
				continue // nobody renews it any more: it never passes again
			}
			live = append(live, c)
		}
		p.claims = live
	}
	for i, a := range passing {
		cur := s.peek(a.Key())
		if cur.Owner != a.Owner() || cur.Fence != a.Fence() {
			return fmt.Errorf("at %v: %s passes Check as %s with fence %d, but the table says %q with fence %d", s.w.now, a.Key(), a.Owner(), a.Fence(), cur.Owner, cur.Fence)
		}
		for _, b := range passing[i+1:] {
			if a.Key() == b.Key() || a.Kind() == KindRange && b.Kind() == KindRange && overlaps(a.Range(), b.Range()) {
				return fmt.Errorf("at %v: %s (%s, fence %d) and %s (%s, fence %d) pass Check at once", s.w.now, a.Key(), a.Owner(), a.Fence(), b.Key(), b.Owner(), b.Fence())
			}
		}
	}
	return nil
}

func runSim(seed uint64, cfg simConfig) (simStats, error) {
	s := &sim{seed: seed, cfg: cfg, mem: leasetest.NewMem(), items: map[string]Item{}, fences: map[string]int64{}, stats: simStats{takes: map[string]int{}},
		w: &simWorld{yield: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}}
	ctx := context.Background()
	if err := CreateTable(ctx, s.mem, testTable); err != nil {
		return s.stats, err
	}
	setup, err := NewWorker(s.mem, WorkerOptions{Table: testTable, Job: testJob, ID: "setup", Duration: D})
	if err != nil {
		return s.stats, err
	}
	ranges, _ := EvenRanges(cfg.ranges)
	if err := setup.Setup(ctx, ranges); err != nil {
		return s.stats, err
	}
	for i := range cfg.workers {
		s.start(fmt.Sprintf("w%d", i), time.Duration(s.w.rng.Float64()*float64(20*time.Second)))
	}
	events, err := s.w.run(cfg.length, s.check)
	s.stats.events = events
	s.w.drain()
	return s.stats, err
}

// --- the workers ---

// simProc is one worker process: a worker id, its own clock and network.
type simProc struct {
	s      *sim
	id     string
	inc    int
	clk    *simClock
	net    *simNet
	w      *Worker
	watch  *Watcher
	slot   *simHeld
	held   map[string]*simHeld
	claims []*Claim // every claim not yet ended, for the checker
	seq    int
	exited bool // its goroutine has returned (crashed, stopped)
}

type simHeld struct {
	c    *Claim
	next time.Duration // when to renew, on the process's clock
}

const simScanEvery = 10 * time.Second

// start starts a process of worker id at time at.
func (s *sim) start(id string, at time.Duration) {
	w := s.w
	p := &simProc{s: s, id: id, inc: len(s.procs), held: map[string]*simHeld{}, watch: NewWatcher()}
	p.clk = &simClock{s: w, rate: s.cfg.minRate + w.rng.Float64()*(s.cfg.maxRate-s.cfg.minRate), offset: time.Duration(w.rng.Int64N(int64(time.Hour)))}
	p.net = newSimNet(w, at, s.cfg.length)
	var err error
	p.w, err = NewWorker(&simAPI{sim: s, net: p.net}, WorkerOptions{Table: testTable, Job: testJob, ID: id, Duration: D, Clock: p.clk})
	if err != nil {
		panic(err)
	}
	p.w.nonce = func() string { p.seq++; return fmt.Sprintf("%d.%d", p.inc, p.seq) }
	s.procs = append(s.procs, p)
	w.spawn(at, func() {
		p.run()
		p.exited = true
	})
}

func (p *simProc) rng() *rand.Rand { return p.s.w.rng }

func (p *simProc) all() []*simHeld {
	keys := make([]string, 0, len(p.held))
	for k := range p.held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []*simHeld
	if p.slot != nil {
		out = append(out, p.slot)
	}
	for _, k := range keys {
		out = append(out, p.held[k])
	}
	return out
}

func (p *simProc) keep(c *Claim, sent time.Duration) *simHeld {
	p.claims = append(p.claims, c)
	return &simHeld{c: c, next: sent + D/3}
}

// run is the worker's loop.
func (p *simProc) run() {
	ctx := context.Background()
	s := p.s
	nextScan := p.clk.Now()
	for !s.w.stopping {
		due := nextScan
		for _, h := range p.all() {
			due = min(due, h.next)
		}
		p.clk.sleep(due - p.clk.Now())
		if s.w.stopping {
			return
		}
		switch r := p.rng().Float64(); {
		case r < 0.006: // a stopped VM, a swap storm
			p.clk.sleep(time.Second + time.Duration(p.rng().Float64()*float64(3*D/2)))
			continue
		case r < 0.008:
			s.stats.crashes++
			s.start(p.id, s.w.now+time.Duration(p.rng().Float64()*float64(2*time.Minute)))
			return
		case r < 0.009:
			s.stats.stops++
			p.stop(ctx)
			s.start(p.id, s.w.now+time.Duration(p.rng().Float64()*float64(time.Minute)))
			return
		case r < 0.010:
			// Replaced while cut off: the new process has the same worker
			// id; this one, a zombie, goes on once its network is back.
			s.stats.zombies++
			cut := s.w.now + 5*time.Second + time.Duration(p.rng().Float64()*float64(90*time.Second))
			p.net.windows = append([]netWindow{{s.w.now, cut, netDrop}}, p.net.windows...)
			s.start(p.id, s.w.now)
		}
		p.renewDue(ctx)
		if p.slot != nil && p.slot.c.errOrNil() != nil {
			p.stop(ctx) // a worker that lost its slot exits
			s.start(p.id, s.w.now+time.Duration(p.rng().Float64()*float64(time.Minute)))
			return
		}
		if p.clk.Now() >= nextScan {
			p.round(ctx)
			nextScan = p.clk.Now() + simScanEvery
		}
	}
}

// renewDue renews every claim whose time has come, and some at random
// other times (Renew may be called whenever the holder likes).
func (p *simProc) renewDue(ctx context.Context) {
	for _, h := range p.all() {
		now := p.clk.Now()
		if now < h.next && p.rng().Float64() >= 0.05 {
			continue
		}
		err := h.c.Renew(ctx)
		switch {
		case err == nil:
			h.next = now + D/3
		case errors.Is(err, ErrLost):
			p.drop(h.c)
		default:
			h.next = p.clk.Now() + D/30
		}
	}
}

func (p *simProc) drop(c *Claim) {
	p.s.stats.lost++
	if p.slot != nil && p.slot.c == c {
		return // run notices
	}
	delete(p.held, c.Key())
}

// stop releases everything, ranges first.
func (p *simProc) stop(ctx context.Context) {
	for _, h := range p.all() {
		if h != p.slot {
			_ = h.c.Release(ctx)
		}
	}
	if p.slot != nil {
		_ = p.slot.c.Release(ctx)
	}
	p.held, p.slot = map[string]*simHeld{}, nil
}

// round is one scan period: scan, balance, act.
func (p *simProc) round(ctx context.Context) {
	s := p.s
	scan, err := p.w.Scan(ctx)
	if err != nil {
		return
	}
	snap := p.watch.Observe(scan)
	o := BalanceOptions{Duration: D}
	if p.slot == nil {
		if it, ok := ChooseSlot(snap, testJob, scan.At, s.cfg.slots, o); ok {
			sent := p.clk.Now()
			if c, err := p.w.Take(ctx, it); err == nil {
				p.slot = p.keep(c, sent)
			}
		}
		return
	}
	plan := Balance(snap, p.id, scan.At, o)
	if p.rng().Float64() < 0.1 {
		// Acting on a plan that has gone stale: a pause between the scan
		// and the writes it decided. The writes' conditions must make up
		// for it.
		p.clk.sleep(time.Duration(p.rng().Float64() * float64(40*time.Second)))
	}
	for _, it := range plan.Take {
		if p.held[it.Key] != nil {
			continue // held by this process, its counter not seen moving yet
		}
		sent := p.clk.Now()
		c, err := p.w.Take(ctx, it)
		if err != nil {
			if errors.Is(err, ErrChanged) {
				s.stats.refused++
			}
			continue
		}
		how := "free"
		switch {
		case it.Owner != "":
			how = "takeover"
		case it.HandoffTo == p.id:
			how = "handoff"
		case it.HandoffTo != "":
			how = "lapsed"
		}
		s.stats.takes[how]++
		p.held[it.Key] = p.keep(c, sent)
	}
	if plan.Ask != nil && p.w.AskHandoff(ctx, *plan.Ask) == nil && p.rng().Float64() < 0.1 {
		// The asker stalls before it can take what it asked for: the
		// holder releases the range to it, and the reservation lapses.
		p.clk.sleep(20*time.Second + time.Duration(p.rng().Float64()*float64(2*time.Minute)))
	}
	for _, it := range plan.Cancel {
		if p.w.CancelHandoff(ctx, it) == nil {
			s.stats.cancels++
		}
	}
	for _, r := range plan.Activate {
		if p.w.Activate(ctx, r) == nil {
			s.stats.activations++
		}
	}
	for _, it := range plan.HandOff {
		h := p.held[it.Key]
		if h == nil {
			continue
		}
		if p.rng().Float64() < 0.7 { // a final checkpoint
			_ = h.c.Commit(ctx, Checkpoint{ID: h.c.Item().Checkpoint.ID + 1, Key: "final"})
		}
		if h.c.Release(ctx) == nil {
			s.stats.handoffs++
		}
		delete(p.held, it.Key)
	}
	// The range pipelines' lease writes: epochs opened, checkpoints
	// committed.
	for _, h := range p.all() {
		if h == p.slot || p.held[h.c.Key()] != h {
			continue
		}
		var err error
		switch r := p.rng().Float64(); {
		case r < 0.15:
			err = h.c.OpenEpoch(ctx, h.c.Item().EpochHigh+1)
		case r < 0.25:
			err = h.c.Commit(ctx, Checkpoint{ID: h.c.Item().Checkpoint.ID + 1, Key: "ck"})
		}
		if errors.Is(err, ErrLost) {
			p.drop(h.c)
		}
	}
	if p.rng().Float64() < 0.01 {
		p.split(ctx, scan.Map)
	}
}

// split splits one range this process holds (of 16 key groups or more)
// in two, in the note's order: savepoint, pending children above the
// parent's counter, retire, map, activate. Any step may fail; what it
// leaves is finished by any worker (Plan.Activate) or stays as it is.
func (p *simProc) split(ctx context.Context, m *RangesMap) {
	var h *simHeld
	for _, x := range p.all() {
		if x != p.slot && x.c.Range().To-x.c.Range().From >= 16 {
			h = x
			break
		}
	}
	if h == nil || m == nil {
		return
	}
	c, r := h.c, h.c.Range()
	sp := c.Item().Checkpoint.ID + 1
	if c.Commit(ctx, Checkpoint{ID: sp, Key: "savepoint"}) != nil {
		return
	}
	next := c.Counter() + 1
	mid := (r.From + r.To) / 2
	children := []Range{{From: r.From, To: mid}, {From: mid, To: r.To}}
	for _, ch := range children {
		if p.w.CreateRange(ctx, RangeSpec{Range: ch, State: StatePending, Counter: next, EpochHigh: c.Item().EpochHigh,
			Origins: []Origin{{Range: r, Checkpoint: sp, EpochHigh: c.Item().EpochHigh}}}) != nil {
			return
		}
	}
	delete(p.held, c.Key())
	if err := c.Retire(ctx, sp, next); err != nil {
		_ = c.Release(ctx)
		return
	}
	p.s.stats.splits++
	var rs []Range
	for _, x := range m.Ranges {
		if x == r {
			rs = append(rs, children...)
		} else {
			rs = append(rs, x)
		}
	}
	_ = p.w.UpdateMap(ctx, *m, rs)
	for _, ch := range children {
		if p.w.Activate(ctx, ch) == nil {
			p.s.stats.activations++
		}
	}
}
