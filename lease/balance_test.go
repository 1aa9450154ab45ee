package lease

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// bnow is the watcher's clock in the balancer tests.
const bnow = time.Hour

// rv describes one range of a test snapshot.
type rv struct {
	owner   string        // "" free
	dead    bool          // its holder has been watched for D without its counter moving
	watched time.Duration // how long its counter has stood still (overrides dead)
	ask     string        // handoff_to
	askAge  time.Duration // how long the request has stood
	state   State         // default active
	dur     time.Duration // the holder's own lease duration (default D)
}

// held returns n ranges held by owner.
func held(owner string, n int) []rv {
	out := make([]rv, n)
	for i := range out {
		out[i] = rv{owner: owner}
	}
	return out
}

func dead(owner string, n int) []rv {
	out := held(owner, n)
	for i := range out {
		out[i].dead = true
	}
	return out
}

func free(n int) []rv { return make([]rv, n) }

// slot describes a slot of a test snapshot: its owner and whether it is
// watched dead.
type slot struct {
	owner string
	dead  bool
}

// snapshot builds a snapshot of len(ranges) even ranges of job "j" and
// the slots.
func snapshot(t *testing.T, slots []slot, groups ...[]rv) Snapshot {
	t.Helper()
	var ranges []rv
	for _, g := range groups {
		ranges = append(ranges, g...)
	}
	rs, err := EvenRanges(len(ranges))
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	for i, r := range ranges {
		it := Item{Key: RangeKey("j", rs[i]), Kind: KindRange, Exists: true, Range: rs[i], Owner: ownerString(r.owner), Worker: r.owner, Counter: 10,
			State: cmpOr(r.state, StateActive), HandoffTo: r.ask, Duration: cmpOr(r.dur, D)}
		if r.owner != "" {
			it.Fence = 9
		}
		since := bnow
		switch {
		case r.watched > 0:
			since = bnow - r.watched
		case r.dead:
			since = bnow - D
		}
		s.Leases = append(s.Leases, Watched{Item: it, Since: since, HandoffSince: bnow - r.askAge})
	}
	for k, sl := range slots {
		since := bnow
		if sl.dead {
			since = bnow - D
		}
		s.Leases = append(s.Leases, Watched{Item: Item{Key: SlotKey("j", k), Kind: KindSlot, Exists: true, Slot: k,
			Owner: ownerString(sl.owner), Worker: sl.owner, Counter: 3, Duration: D}, Since: since, HandoffSince: since})
	}
	return s
}

// ownerString is a tenure's owner string of worker w ("" for none).
func ownerString(w string) string {
	if w == "" {
		return ""
	}
	return w + "~0a1b"
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func slots(owners ...string) []slot {
	out := make([]slot, len(owners))
	for i, o := range owners {
		out[i] = slot{owner: o}
	}
	return out
}

// owners maps range keys of s to their owners, for readable plans.
func describe(s Snapshot, its []Item) string {
	var parts []string
	for _, it := range its {
		who := "free"
		for _, l := range s.Leases {
			if l.Key == it.Key && l.Owner != "" {
				who = l.Worker
			}
		}
		parts = append(parts, it.Range.String()+"("+who+")")
	}
	return strings.Join(parts, " ")
}

func TestBalanceKCL(t *testing.T) {
	o := BalanceOptions{Duration: D}
	for _, tc := range []struct {
		name  string
		me    string
		s     func(t *testing.T) Snapshot
		check func(t *testing.T, s Snapshot, p Plan)
	}{{
		name: "a lone worker takes every range",
		me:   "a",
		s:    func(t *testing.T) Snapshot { return snapshot(t, slots("a"), free(4)) },
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 1, 4, 0)
			wantTake(t, s, p, 4, "")
		},
	}, {
		name: "target is ceil(ranges / live workers)",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 6), held("b", 5), free(5))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 6, 0)
			wantTake(t, s, p, 5, "")
			wantNoAsk(t, p)
		},
	}, {
		name: "workers starting together take only up to target",
		me:   "b",
		s:    func(t *testing.T) Snapshot { return snapshot(t, slots("a", "b"), free(16)) },
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 2, 8, 0)
			wantTake(t, s, p, 8, "")
		},
	}, {
		name: "balanced: the most loaded does nothing",
		me:   "a",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 6), held("b", 5), held("c", 5))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 6, 6)
			wantNothing(t, p)
		},
	}, {
		name: "balanced: one below target does not steal from a worker at target",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 6), held("b", 5), held("c", 5))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 6, 5)
			wantNothing(t, p)
		},
	}, {
		name: "balanced: 4 ranges on 3 workers at 2/1/1",
		me:   "b",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 2), held("b", 1), held("c", 1))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 2, 1)
			wantNothing(t, p)
		},
	}, {
		name: "a new worker steals one range from the most loaded (ties to the lowest id)",
		me:   "c",
		s:    func(t *testing.T) Snapshot { return snapshot(t, slots("a", "b", "c"), held("b", 8), held("a", 8)) },
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 6, 0)
			if len(p.Take) != 0 {
				t.Errorf("Take %s, want nothing (nothing free or expired)", describe(s, p.Take))
			}
			wantAsk(t, s, p, "a")
		},
	}, {
		name: "the most loaded is asked, not the first",
		me:   "d",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c", "d"), held("a", 5), held("b", 7), held("c", 4))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 4, 4, 0)
			wantAsk(t, s, p, "b")
		},
	}, {
		name: "a worker at target is asked when the asker needs more than one (KCL)",
		me:   "c",
		s:    func(t *testing.T) Snapshot { return snapshot(t, slots("a", "b", "c"), held("a", 2), held("b", 2)) },
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 2, 0)
			wantAsk(t, s, p, "a")
		},
	}, {
		name: "a worker at target is not asked when the asker needs one",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 2), held("b", 2), held("c", 1))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 2, 1)
			wantNothing(t, p)
		},
	}, {
		name: "expired ranges are taken before anything is stolen",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, []slot{{owner: "a"}, {owner: "b", dead: true}, {owner: "c"}}, held("a", 8), dead("b", 8))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 2, 8, 0)
			wantTake(t, s, p, 8, "b")
			wantNoAsk(t, p)
		},
	}, {
		name: "free ranges before expired ones, and no steal while anything can be taken",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "c"), held("a", 10), dead("b", 4), free(2))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 2, 8, 0)
			if got := describe(s, p.Take); len(p.Take) != 6 || !strings.HasPrefix(got, p.Take[0].Range.String()+"(free) ") ||
				strings.Count(got, "(free)") != 2 || strings.Contains(describe(s, p.Take[:2]), "(b)") {
				t.Errorf("Take %s, want the 2 free ranges then the 4 expired ones", got)
			}
			wantNoAsk(t, p)
		},
	}, {
		name: "a holder watched for less than D is alive",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 4), []rv{{owner: "b", watched: D - time.Millisecond}}, held("b", 3))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 3, 0)
			if len(p.Take) != 0 {
				t.Errorf("Take %s, want nothing: b's counter stood still for less than D", describe(s, p.Take))
			}
			wantAsk(t, s, p, "a")
		},
	}, {
		name: "a holder's own longer duration is watched",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "c"), []rv{{owner: "a", watched: D, dur: 2 * D}, {owner: "a", watched: 2 * D, dur: 2 * D}})
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 2, 1, 0)
			if got := describe(s, p.Take); len(p.Take) != 1 || p.Take[0].Range != (Range{From: 64, To: 128}) {
				t.Errorf("Take %s, want only 64-128 (watched for its holder's 2D)", got)
			}
		},
	}, {
		name: "a worker leaving cleanly: its released ranges are taken up to the new target",
		me:   "a",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "", "c"), held("a", 6), free(5), held("c", 5))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 2, 8, 6)
			wantTake(t, s, p, 2, "")
		},
	}, {
		name: "a worker dying: nothing moves before its holder is watched dead",
		me:   "a",
		s: func(t *testing.T) Snapshot {
			b := held("b", 5)
			for i := range b {
				b[i].watched = D / 2
			}
			return snapshot(t, []slot{{owner: "a"}, {owner: "b"}, {owner: "c"}}, held("a", 6), b, held("c", 5))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 6, 6)
			wantNothing(t, p)
		},
	}, {
		name: "a worker dying: once watched dead, its ranges are taken up to the new target",
		me:   "a",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, []slot{{owner: "a"}, {owner: "b", dead: true}, {owner: "c"}}, held("a", 6), dead("b", 5), held("c", 5))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 2, 8, 6)
			wantTake(t, s, p, 2, "b")
		},
	}, {
		name: "a pending request of mine: no second ask",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			a := held("a", 8)
			a[0].ask, a[0].askAge = "c", D
			return snapshot(t, slots("a", "b", "c"), a, held("b", 8))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantNothing(t, p)
		},
	}, {
		name: "my request lapses after the handoff timeout: cancel it, and ask nothing this round",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			a := held("a", 8)
			a[0].ask, a[0].askAge = "c", 2*D
			return snapshot(t, slots("a", "b", "c"), a, held("b", 8))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			if len(p.Cancel) != 1 || p.Cancel[0].Range != (Range{From: 0, To: 8}) || p.Cancel[0].HandoffTo != "c" {
				t.Errorf("Cancel %s, want 0-8 (c's lapsed request)", describe(s, p.Cancel))
			}
			wantNoAsk(t, p)
			if len(p.Take) != 0 {
				t.Errorf("Take %s, want nothing: a live holder's lease is never taken", describe(s, p.Take))
			}
		},
	}, {
		name: "the ask goes to a range without a request on it",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			a := held("a", 2)
			a[0].ask = "d"
			return snapshot(t, slots("a", "b", "c", "d"), a, held("b", 1), held("d", 1))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 4, 1, 0)
			if p.Ask == nil || p.Ask.Range != (Range{From: 32, To: 64}) {
				t.Errorf("Ask %v, want 32-64 (a's range without a request)", p.Ask)
			}
		},
	}, {
		name: "a range released to me is taken at once, even past target",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 1), held("b", 1), held("c", 1), []rv{{ask: "c"}})
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 2, 1)
			if len(p.Take) != 1 || p.Take[0].Range != (Range{From: 96, To: 128}) {
				t.Errorf("Take %s, want 96-128 (released to c)", describe(s, p.Take))
			}
		},
	}, {
		name: "a range released to another worker is left to it until the reservation lapses",
		me:   "c",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a", "b", "c"), held("a", 2), []rv{{ask: "b", askAge: 3 * D}}, []rv{{ask: "b", askAge: 2 * D, watched: 2 * D}})
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 3, 2, 0)
			if len(p.Take) != 1 || p.Take[0].Range != (Range{From: 96, To: 128}) {
				t.Errorf("Take %s, want 96-128 only (reserved for b, released 2D ago; 64-96 was released just now)", describe(s, p.Take))
			}
			wantNoAsk(t, p)
		},
	}, {
		name: "requests on my ranges: honoured for a live asker, removed for a gone one",
		me:   "a",
		s: func(t *testing.T) Snapshot {
			a := held("a", 3)
			a[0].ask, a[1].ask = "b", "x"
			return snapshot(t, []slot{{owner: "a"}, {owner: "b"}, {owner: "x", dead: true}}, a, held("b", 1))
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			if len(p.HandOff) != 1 || p.HandOff[0].Range != (Range{From: 0, To: 32}) {
				t.Errorf("HandOff %s, want 0-32 (asked by b)", describe(s, p.HandOff))
			}
			if len(p.Cancel) != 1 || p.Cancel[0].Range != (Range{From: 32, To: 64}) {
				t.Errorf("Cancel %s, want 32-64 (asked by x, whose slot is dead)", describe(s, p.Cancel))
			}
		},
	}, {
		name: "pending and retired ranges are neither counted nor taken",
		me:   "a",
		s: func(t *testing.T) Snapshot {
			return snapshot(t, slots("a"), []rv{{state: StateRetired}, {state: StatePending}, {}, {}})
		},
		check: func(t *testing.T, s Snapshot, p Plan) {
			wantPlan(t, p, 1, 2, 0)
			wantTake(t, s, p, 2, "")
			for _, it := range p.Take {
				if it.State != StateActive {
					t.Errorf("Take lists %v, which is %s", it.Range, it.State)
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s(t)
			p := Balance(s, tc.me, bnow, o)
			tc.check(t, s, p)
			if again := Balance(s, tc.me, bnow, o); !reflect.DeepEqual(again, p) {
				t.Errorf("a second Balance of the same snapshot gave %+v, want %+v", again, p)
			}
		})
	}
}

func wantPlan(t *testing.T, p Plan, workers, target, held int) {
	t.Helper()
	if p.Workers != workers || p.Target != target || p.Held != held {
		t.Errorf("workers %d, target %d, held %d; want %d, %d, %d", p.Workers, p.Target, p.Held, workers, target, held)
	}
}

// wantTake checks that p takes n ranges, all of them free (from "") or
// held by from.
func wantTake(t *testing.T, s Snapshot, p Plan, n int, from string) {
	t.Helper()
	if len(p.Take) != n {
		t.Errorf("Take %s: %d ranges, want %d", describe(s, p.Take), len(p.Take), n)
	}
	for _, it := range p.Take {
		if it.Worker != from {
			t.Errorf("Take lists %v held by %q, want only ranges held by %q", it.Range, it.Worker, from)
		}
	}
}

func wantAsk(t *testing.T, s Snapshot, p Plan, holder string) {
	t.Helper()
	if p.Ask == nil || p.Ask.Worker != holder {
		t.Errorf("Ask %v, want one range of %s", p.Ask, holder)
	}
}

func wantNoAsk(t *testing.T, p Plan) {
	t.Helper()
	if p.Ask != nil {
		t.Errorf("Ask %v (held by %s), want none", p.Ask.Range, p.Ask.Worker)
	}
}

func wantNothing(t *testing.T, p Plan) {
	t.Helper()
	if len(p.Take) != 0 || p.Ask != nil || len(p.HandOff) != 0 || len(p.Cancel) != 0 {
		t.Errorf("plan %+v, want nothing to do", p)
	}
}

// Workers that start together each prefer other ranges (a hash of the
// worker and the key), so that their takes collide less.
func TestBalanceSpreadsTakers(t *testing.T) {
	s := snapshot(t, slots("a", "b", "c", "d"), free(16))
	seen := map[Range]string{}
	collisions := 0
	for _, me := range []string{"a", "b", "c", "d"} {
		p := Balance(s, me, bnow, BalanceOptions{Duration: D})
		if len(p.Take) != 4 {
			t.Fatalf("%s takes %d, want 4", me, len(p.Take))
		}
		for _, it := range p.Take {
			if _, ok := seen[it.Range]; ok {
				collisions++
			}
			seen[it.Range] = me
		}
	}
	if collisions > 8 {
		t.Errorf("%d of 16 takes collide, want the workers to prefer different ranges", collisions)
	}
}

// Driving the balancer round after round over a model of the table: a
// fleet converges to within one range of even, and then stays put.
func TestBalanceConverges(t *testing.T) {
	for _, tc := range []struct {
		ranges, workers int
	}{{16, 2}, {16, 3}, {16, 5}, {4, 3}, {10, 4}, {16, 16}, {8, 12}} {
		t.Run(fmt.Sprintf("%d ranges on %d workers", tc.ranges, tc.workers), func(t *testing.T) {
			owners := make([]string, tc.ranges)
			asks := make([]string, tc.ranges)
			var ws []slot
			for i := range tc.workers {
				ws = append(ws, slot{owner: fmt.Sprintf("w%02d", i)})
			}
			for i := range owners {
				owners[i] = ws[0].owner // the first worker holds everything at first
			}
			stable := 0
			for round := 0; round < 200 && stable < 3; round++ {
				moved := false
				for _, w := range ws {
					var rs []rv
					for i := range owners {
						rs = append(rs, rv{owner: owners[i], ask: asks[i]})
					}
					s := snapshot(t, ws, rs)
					p := Balance(s, w.owner, bnow, BalanceOptions{Duration: D})
					for _, h := range p.HandOff { // hand off and the asker takes it at once
						i := slices.IndexFunc(s.Leases, func(l Watched) bool { return l.Key == h.Key })
						owners[i], asks[i] = h.HandoffTo, ""
						moved = true
					}
					for _, it := range p.Take {
						i := slices.IndexFunc(s.Leases, func(l Watched) bool { return l.Key == it.Key })
						owners[i], asks[i] = w.owner, ""
						moved = true
					}
					if p.Ask != nil {
						i := slices.IndexFunc(s.Leases, func(l Watched) bool { return l.Key == p.Ask.Key })
						asks[i] = w.owner
						moved = true
					}
				}
				if moved {
					stable = 0
				} else {
					stable++
				}
			}
			if stable < 3 {
				t.Fatalf("still moving after 200 rounds: %v", owners)
			}
			count := map[string]int{}
			for _, o := range owners {
				count[o]++
			}
			lo, hi := tc.ranges, 0
			for _, w := range ws {
				lo, hi = min(lo, count[w.owner]), max(hi, count[w.owner])
			}
			if hi-lo > 1 {
				t.Errorf("settled at %v: counts from %d to %d, want within one", count, lo, hi)
			}
		})
	}
}

func TestWatcher(t *testing.T) {
	w := NewWatcher()
	it := Item{Key: "j#kg0-128", Kind: KindRange, Exists: true, Range: AllKeyGroups, Owner: "a~1", Worker: "a", Counter: 1, State: StateActive}
	s := w.Observe(TableScan{Items: []Item{it}, At: 10 * time.Second})
	if l := s.Leases[0]; l.Since != 10*time.Second || l.HandoffSince != 10*time.Second {
		t.Errorf("first sight: since %v, handoff since %v; want 10s, 10s", l.Since, l.HandoffSince)
	}
	// Unchanged: the watch goes on.
	s = w.Observe(TableScan{Items: []Item{it}, At: 20 * time.Second})
	if l := s.Leases[0]; l.Since != 10*time.Second || !l.Expired(40*time.Second, D) || l.Expired(40*time.Second-1, D) {
		t.Errorf("unchanged: since %v, want 10s, expired from 40s on", l.Since)
	}
	// A handoff request: the counter's watch goes on, the request's starts.
	it.HandoffTo = "b"
	s = w.ObserveItem(it, 25*time.Second)
	if l := s.Leases[0]; l.Since != 10*time.Second || l.HandoffSince != 25*time.Second {
		t.Errorf("after a request: since %v, handoff since %v; want 10s, 25s", l.Since, l.HandoffSince)
	}
	// A renewal: the watch starts again.
	it.Counter = 2
	s = w.Observe(TableScan{Items: []Item{it}, At: 30 * time.Second})
	if l := s.Leases[0]; l.Since != 30*time.Second || l.HandoffSince != 25*time.Second || l.Expired(59*time.Second, D) {
		t.Errorf("after a renewal: since %v, handoff since %v; want 30s, 25s", l.Since, l.HandoffSince)
	}
	// A new owner at the same counter (cannot happen, but is a change).
	it.Owner, it.Worker = "c~1", "c"
	if l := w.Observe(TableScan{Items: []Item{it}, At: 35 * time.Second}).Leases[0]; l.Since != 35*time.Second {
		t.Errorf("after an owner change: since %v, want 35s", l.Since)
	}
	// Items missing from a scan are forgotten; seen again, they are new.
	if s := w.Observe(TableScan{At: 40 * time.Second}); len(s.Leases) != 0 {
		t.Errorf("after an empty scan: %d leases, want 0", len(s.Leases))
	}
	if l := w.Observe(TableScan{Items: []Item{it}, At: 50 * time.Second}).Leases[0]; l.Since != 50*time.Second {
		t.Errorf("seen again: since %v, want 50s", l.Since)
	}
	// Free items are never expired.
	if (Watched{Item: Item{Kind: KindRange}, Since: 0}).Expired(time.Hour, D) {
		t.Error("a free item is expired, want not")
	}
}

func TestChooseSlot(t *testing.T) {
	o := BalanceOptions{Duration: D}
	for _, tc := range []struct {
		name  string
		slots []slot
		want  int // -1: none
	}{
		{"no slot yet", nil, 0},
		{"lowest missing", slots("a", "b"), 2},
		{"a released slot", slots("a", "", "c"), 1},
		{"a dead worker's slot is reused", []slot{{owner: "a"}, {owner: "b", dead: true}}, 1},
		{"all held", slots("a", "b", "c", "d"), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot(t, tc.slots, free(1))
			it, ok := ChooseSlot(s, "j", bnow, 4, o)
			switch {
			case tc.want < 0 && ok:
				t.Errorf("chose %s, want none", it.Key)
			case tc.want >= 0 && (!ok || it.Key != SlotKey("j", tc.want) || it.Slot != tc.want || it.Kind != KindSlot):
				t.Errorf("chose %+v (ok %v), want slot %d", it, ok, tc.want)
			}
		})
	}
}

func TestBalanceActivates(t *testing.T) {
	parent := Range{From: 0, To: 64}
	mk := func(r Range, st State, origins ...Range) Watched {
		it := Item{Key: RangeKey("j", r), Kind: KindRange, Exists: true, Range: r, State: st}
		for _, o := range origins {
			it.Origins = append(it.Origins, Origin{Range: o})
		}
		return Watched{Item: it}
	}
	for _, tc := range []struct {
		name   string
		leases []Watched
		want   []Range
	}{
		{"origin still active", []Watched{mk(parent, StateActive), mk(Range{From: 0, To: 32}, StatePending, parent), mk(Range{From: 32, To: 64}, StatePending, parent)}, nil},
		{"origin retired", []Watched{mk(parent, StateRetired), mk(Range{From: 0, To: 32}, StatePending, parent), mk(Range{From: 32, To: 64}, StateActive, parent)}, []Range{{From: 0, To: 32}}},
		{"origin missing", []Watched{mk(Range{From: 0, To: 32}, StatePending, parent)}, nil},
		{"two sets of children", []Watched{mk(parent, StateRetired), mk(Range{From: 0, To: 32}, StatePending, parent), mk(Range{From: 0, To: 16}, StatePending, parent)}, nil},
		{"a merge", []Watched{mk(Range{From: 0, To: 32}, StateRetired), mk(Range{From: 32, To: 64}, StateRetired), mk(parent, StatePending, Range{From: 0, To: 32}, Range{From: 32, To: 64})}, []Range{parent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Balance(Snapshot{Leases: tc.leases}, "a", bnow, BalanceOptions{})
			if !slices.Equal(p.Activate, tc.want) {
				t.Errorf("Activate %v, want %v", p.Activate, tc.want)
			}
		})
	}
}
