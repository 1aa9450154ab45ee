package lease

import (
	"context"
	"errors"
	"testing"
	"time"
)

// member is a worker of the handoff tests, driven by hand on a fake clock:
// each round scans, balances and carries out the plan.
type member struct {
	t       *testing.T
	w       *Worker
	watch   *Watcher
	slot    *Claim
	claims  map[string]*Claim
	honour  bool // hand off what is asked (a holder that does not stands for one that is busy or stuck)
	plans   []Plan
	lastErr error
}

func newMember(t *testing.T, api RangeAPI, owner string, clk Clock) *member {
	return &member{t: t, w: newWorker(t, api, testTable, owner, clk), watch: NewWatcher(), claims: map[string]*Claim{}, honour: true}
}

// renew renews every claim (its slot too).
func (m *member) renew() {
	m.t.Helper()
	for _, c := range append([]*Claim{m.slot}, mapValues(m.claims)...) {
		if c == nil {
			continue
		}
		if err := c.Renew(context.Background()); err != nil {
			m.t.Fatalf("%s renews %s: %v", m.w.ID(), c.Key(), err)
		}
	}
}

func mapValues(m map[string]*Claim) []*Claim {
	var out []*Claim
	for _, c := range m {
		out = append(out, c)
	}
	return out
}

// round scans, takes a slot if it has none, balances and acts; it returns
// the plan.
func (m *member) round() Plan {
	m.t.Helper()
	ctx := context.Background()
	s := mustScan(m.t, m.w)
	snap := m.watch.Observe(s)
	o := BalanceOptions{Duration: D}
	if m.slot == nil {
		it, ok := ChooseSlot(snap, testJob, s.At, 8, o)
		if !ok {
			m.t.Fatalf("%s: no slot", m.w.ID())
		}
		m.slot = mustTake(m.t, m.w, it)
		return Plan{}
	}
	p := Balance(snap, m.w.ID(), s.At, o)
	m.plans = append(m.plans, p)
	for _, it := range p.Take {
		c, err := m.w.Take(ctx, it)
		if err != nil {
			m.lastErr = err
			continue
		}
		m.claims[it.Key] = c
	}
	if p.Ask != nil {
		if err := m.w.AskHandoff(ctx, *p.Ask); err != nil {
			m.lastErr = err
		}
	}
	for _, it := range p.Cancel {
		if err := m.w.CancelHandoff(ctx, it); err != nil {
			m.lastErr = err
		}
	}
	if m.honour {
		for _, it := range p.HandOff {
			c := m.claims[it.Key]
			if c == nil {
				m.t.Fatalf("%s is told to hand off %s, which it does not hold", m.w.ID(), it.Key)
			}
			if err := c.Release(ctx); err != nil {
				m.t.Fatalf("%s releases %s: %v", m.w.ID(), it.Key, err)
			}
			delete(m.claims, it.Key)
		}
	}
	return p
}

// A handoff request the holder does not honour lapses after the handoff
// timeout (2D): the asker removes it, and the holder keeps its range. A
// live holder's lease is never taken.
func TestHandoffRequestLapses(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	if err := newWorker(t, api, testTable, "setup", clk).Setup(context.Background(), []Range{{From: 0, To: 64}, {From: 64, To: 128}}); err != nil {
		t.Fatal(err)
	}
	a, b := newMember(t, api, "a", clk), newMember(t, api, "b", clk)
	a.honour = false
	a.round() // slot
	a.round() // alone: takes both ranges
	if len(a.claims) != 2 {
		t.Fatalf("a holds %d ranges, want 2", len(a.claims))
	}
	b.round() // slot
	p := b.round()
	if p.Ask == nil || p.Ask.Worker != "a" {
		t.Fatalf("b's plan %+v, want an ask of one of a's ranges", p)
	}
	asked := p.Ask.Key
	askedAt := clk.Now()
	const step = D / 6 // 5 s: a renews every other step
	for i := 1; ; i++ {
		clk.Advance(step)
		if i%2 == 0 {
			a.renew()
			b.renew()
		}
		ap := a.round()
		if len(ap.HandOff) != 1 || ap.HandOff[0].Key != asked {
			t.Fatalf("at %v a's plan %+v, want it told to hand off %s", clk.Now()-askedAt, ap, asked)
		}
		p := b.round()
		elapsed := clk.Now() - askedAt
		if p.Ask != nil || len(p.Take) != 0 {
			t.Fatalf("at %v b's plan %+v, want no ask (one pending) and nothing to take", elapsed, p)
		}
		// b watches its request from the first scan that shows it, one
		// scan period after the ask at most.
		if elapsed < 2*D {
			if len(p.Cancel) != 0 {
				t.Fatalf("at %v (< 2D) b cancels %+v, want the request still pending", elapsed, p.Cancel)
			}
			continue
		}
		if len(p.Cancel) == 0 && elapsed < 2*D+step {
			continue
		}
		if len(p.Cancel) != 1 || p.Cancel[0].Key != asked {
			t.Fatalf("at %v (2D + a scan period) b's plan %+v, want its request on %s cancelled", elapsed, p, asked)
		}
		if b.lastErr != nil {
			t.Fatalf("b: %v", b.lastErr)
		}
		break
	}
	it, _, err := b.w.Read(context.Background(), asked)
	if err != nil {
		t.Fatal(err)
	}
	if it.HandoffTo != "" || it.Worker != "a" {
		t.Errorf("after the lapse: %+v, want a's, no request", it)
	}
	for key, c := range a.claims {
		if err := c.Check(); err != nil {
			t.Errorf("a's Check of %s after the lapse: %v", key, err)
		}
	}
	// The next round b may ask again.
	clk.Advance(step)
	a.round()
	if p := b.round(); p.Ask == nil {
		t.Errorf("b's plan after the lapse %+v, want a new ask", p)
	}
}

// A range handed off to an asker that then dies stays reserved for it for
// the handoff timeout, then any worker may take it.
func TestHandoffReservationLapses(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	if err := newWorker(t, api, testTable, "setup", clk).Setup(context.Background(), []Range{{From: 0, To: 32}, {From: 32, To: 64}, {From: 64, To: 128}}); err != nil {
		t.Fatal(err)
	}
	a, b, c := newMember(t, api, "a", clk), newMember(t, api, "b", clk), newMember(t, api, "c", clk)
	a.round()
	c.round()
	a.round() // target 2 (2 workers): a takes 2
	c.round() // and c the third
	if len(a.claims) != 2 || len(c.claims) != 1 {
		t.Fatalf("a holds %d, c %d; want 2 and 1", len(a.claims), len(c.claims))
	}
	b.round() // slot
	p := b.round()
	if p.Ask == nil || p.Ask.Worker != "a" {
		t.Fatalf("b's plan %+v, want an ask of one of a's ranges", p)
	}
	key := p.Ask.Key
	a.round() // honours it: releases key, reserved for b
	it, _, err := a.w.Read(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !it.Free() || it.HandoffTo != "b" {
		t.Fatalf("after the handoff: %+v, want free, reserved for b", it)
	}
	released := clk.Now()
	// b dies before taking it. The others watch it; nobody takes it
	// before 2D.
	const step = D / 6
	for i := 1; ; i++ {
		clk.Advance(step)
		if i%2 == 0 {
			a.renew()
			c.renew()
		}
		pa, pc := a.round(), c.round()
		elapsed := clk.Now() - released
		var took []string
		for _, m := range []*member{a, c} {
			if _, ok := m.claims[key]; ok {
				took = append(took, m.w.ID())
			}
		}
		if elapsed < 2*D {
			if len(took) != 0 {
				t.Fatalf("at %v (< 2D) %v took %s, reserved for b", elapsed, took, key)
			}
			continue
		}
		if len(took) == 0 && elapsed < 2*D+step {
			continue // watched from the first scan after the release
		}
		if len(took) != 1 {
			t.Fatalf("at %v (2D) %v took %s (plans %+v, %+v), want exactly one", elapsed, took, key, pa, pc)
		}
		for _, m := range []*member{a, c} {
			if m.lastErr != nil && !errors.Is(m.lastErr, ErrChanged) {
				t.Errorf("%s: %v", m.w.ID(), m.lastErr)
			}
		}
		break
	}
	it, _, err = a.w.Read(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if it.HandoffTo != "" || it.Owner == "" || it.Worker == "b" {
		t.Errorf("after the reservation lapsed: %+v, want taken by a or c, request removed", it)
	}
}

// The asker takes a range handed off to it at once, not after a scan
// period's watch.
func TestHandoffTakenAtOnce(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	if err := newWorker(t, api, testTable, "setup", clk).Setup(context.Background(), []Range{{From: 0, To: 64}, {From: 64, To: 128}}); err != nil {
		t.Fatal(err)
	}
	a, b := newMember(t, api, "a", clk), newMember(t, api, "b", clk)
	a.round()
	a.round()
	b.round()
	p := b.round()
	if p.Ask == nil {
		t.Fatalf("b's plan %+v, want an ask", p)
	}
	clk.Advance(time.Second)
	a.round() // releases it to b
	clk.Advance(time.Second)
	if p2 := b.round(); len(p2.Take) != 1 || p2.Take[0].Key != p.Ask.Key || len(b.claims) != 1 {
		t.Fatalf("b's plan %+v, b holds %d; want the handed-off range taken at once", p2, len(b.claims))
	}
	for _, m := range []*member{a, b} {
		if p := m.round(); len(p.Take)+len(p.HandOff)+len(p.Cancel) != 0 || p.Ask != nil {
			t.Errorf("%s's plan once balanced: %+v, want nothing", m.w.ID(), p)
		}
	}
}
