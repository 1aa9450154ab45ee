package recount

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/sink"
)

// The recount's counting works on compact records sorted by a hash of the
// click id, not on maps: a partition's accepted copies are radix-sorted by
// (hash, id) and reduced to the earliest copy per id; an hour's ids are
// matched with its neighbours' and with the stream's rows by merging sorted
// lists. Ads are interned as small integers.

// cand is an accepted copy of a click id.
type cand struct {
	hash    uint64
	id      string
	arrival int64
	event   int64
	spend   int64
	shard   string
	seq     string
	ad      int32
}

// idCmp orders by (hash, id).
func idCmp(ah uint64, aid string, bh uint64, bid string) int {
	if ah != bh {
		return cmp.Compare(ah, bh)
	}
	return strings.Compare(aid, bid)
}

// better orders copies of one click id: the earliest arrival wins; ties go
// by shard, sequence number, event time, ad and spend.
func (r *runner) better(a, b *cand) int {
	return cmp.Or(cmp.Compare(a.arrival, b.arrival), strings.Compare(a.shard, b.shard), strings.Compare(a.seq, b.seq),
		cmp.Compare(a.event, b.event), strings.Compare(r.ads[a.ad], r.ads[b.ad]), cmp.Compare(a.spend, b.spend))
}

// partition is what the recount keeps of one hour's partition.
type partition struct {
	hourMs   int64
	rows     int64
	best     []cand // earliest accepted copy per click id, by (hash, id)
	copies   int64  // accepted copies beyond the first per id
	invalid  int64
	beyond   int64
	misfiled int64
	// stream: the rows the stream counted (counted or late), in read
	// order; only kept for the hours being recounted.
	stream []streamRow
	kept   bool
}

type streamRow struct {
	hash  uint64
	id    string
	spend int64
	pos   int64 // read order within the partition
	ad    int32
}

type runner struct {
	o       *Options
	targets map[int64]bool
	cache   map[int64]*partition
	rows    int64
	done    int
	total   int
	fences  *fences // the scopes' fence records, listed once per run

	seed  maphash.Seed
	ads   []string // interned ads
	adIx  map[string]int32
	sc    scanner
	keys  []hkey // sort scratch
	keys2 []hkey
	count []int   // radix counts
	accs  []adAcc // by interned ad, reset after each hour
}

func newRunner(o *Options, total int) *runner {
	return &runner{o: o, cache: map[int64]*partition{}, total: total, targets: map[int64]bool{},
		seed: maphash.MakeSeed(), adIx: map[string]int32{}}
}

// idHashMask masks the click-id hash; tests lower it to force collisions.
var idHashMask = ^uint64(0)

func (r *runner) hash(id string) uint64 { return maphash.String(r.seed, id) & idHashMask }

// ad interns ad.
func (r *runner) ad(ad string) int32 {
	if i, ok := r.adIx[ad]; ok {
		return i
	}
	i := int32(len(r.ads))
	r.ads = append(r.ads, ad)
	r.adIx[ad] = i
	return i
}

// span is how many hours apart two accepted copies of a click id (same
// impression) can lie: their event times are within horizon + allowance +
// 1 ms of the impression.
func (r *runner) span() int64 {
	return (r.o.Judge.HorizonMs + *r.o.Judge.AllowanceMs + 1 + eventtime.HourMs - 1) / eventtime.HourMs
}

// scanHour calls fn with the rows of the hour's objects (those of the fence
// that holds each epoch, see OpenFence), a batch at a time, object by
// object in key order.
func (r *runner) scanHour(ctx context.Context, hourMs int64, fn func(*batch) error) error {
	if r.fences == nil {
		r.fences = newFences(r.o.Store)
	}
	keys, err := hourKeys(ctx, r.o.Store, r.fences, hourMs)
	if err != nil {
		return err
	}
	for _, k := range keys {
		b, err := r.o.Store.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return fmt.Errorf("recount: read hour %s: %w", FormatHour(hourMs), err)
		}
		if err := r.sc.scan(b, fn); err != nil {
			return fmt.Errorf("recount: read %s: %w", k, err)
		}
	}
	return nil
}

// load reads (or returns from the cache) the partition of hour h; with
// stream it also keeps the rows the stream counted.
func (r *runner) load(ctx context.Context, h int64, stream bool) (*partition, error) {
	if p, ok := r.cache[h]; ok && (!stream || p.kept) {
		return p, nil
	}
	stream = stream || r.targets[h]
	p := &partition{hourMs: h, kept: stream}
	j := &r.o.Judge
	var all []cand
	var c ingest.Click
	err := r.scanHour(ctx, h, func(b *batch) error {
		verdicts, ids, ads := b.strs[colVerdict], b.strs[colClickID], b.strs[colAdID]
		camps, devs, shards, seqs := b.strs[colCampaignID], b.strs[colDeviceID], b.strs[colShard], b.strs[colSeq]
		imps, devMs, arrs, spends := b.ints[colImpression], b.ints[colDevice], b.ints[colArrival], b.ints[colSpend]
		for i := 0; i < b.n; i++ {
			p.rows++
			r.rows++
			if r.o.Progress != nil && r.rows%65536 == 0 {
				r.o.Progress(Progress{HourMs: h, HoursDone: r.done, HoursTotal: r.total, Rows: r.rows})
			}
			v := verdicts[i]
			if stream && (v == latepath.VerdictCounted || v == latepath.VerdictLate) {
				p.stream = append(p.stream, streamRow{hash: r.hash(ids[i]), id: ids[i], spend: spends[i], pos: p.rows, ad: r.ad(ads[i])})
			}
			if strings.HasPrefix(v, latepath.InvalidPrefix) {
				p.invalid++
				continue
			}
			c = ingest.Click{ClickID: ids[i], AdID: ads[i], CampaignID: camps[i], DeviceID: devs[i],
				ImpressionMs: imps[i], DeviceMs: devMs[i], SpendMicros: spends[i], Shard: shards[i]}
			switch out, _ := j.decide(&c, arrs[i]); out {
			case Invalid:
				p.invalid++
				continue
			case BeyondHorizon:
				p.beyond++
				continue
			}
			if c.EventMs-floorMod(c.EventMs, eventtime.HourMs) != h {
				p.misfiled++
			}
			all = append(all, cand{hash: r.hash(c.ClickID), id: c.ClickID, arrival: c.ArrivalMs, event: c.EventMs,
				spend: c.SpendMicros, shard: c.Shard, seq: seqs[i], ad: r.ad(c.AdID)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.best, p.copies = r.dedup(all)
	if stream {
		r.sortStream(p.stream)
	}
	if r.o.m != nil {
		r.o.m.rowsRead.Add(float64(p.rows))
	}
	r.cache[h] = p
	return p, nil
}

// dedup returns the earliest copy of each click id of all, ordered by
// (hash, id), and the number of other copies.
func (r *runner) dedup(all []cand) ([]cand, int64) {
	keys := r.sortKeys(len(all), func(i int) uint64 { return all[i].hash })
	best := make([]cand, 0, len(all))
	var copies int64
	var group []uint32
	for i := 0; i < len(keys); {
		k := i + 1
		for k < len(keys) && keys[k].h == keys[i].h {
			k++
		}
		if k == i+1 {
			best = append(best, all[keys[i].i])
			i = k
			continue
		}
		// Copies of one id (or, rarely, ids with one hash): by id, then
		// the winner first.
		group = group[:0]
		for _, kk := range keys[i:k] {
			group = append(group, kk.i)
		}
		slices.SortFunc(group, func(a, b uint32) int {
			return cmp.Or(strings.Compare(all[a].id, all[b].id), r.better(&all[a], &all[b]))
		})
		for g := 0; g < len(group); g++ {
			if g > 0 && all[group[g]].id == all[group[g-1]].id {
				copies++
				continue
			}
			best = append(best, all[group[g]])
		}
		i = k
	}
	return best, copies
}

// sortStream orders s by (hash, id), keeping read order among rows of one
// id.
func (r *runner) sortStream(s []streamRow) {
	keys := r.sortKeys(len(s), func(i int) uint64 { return s[i].hash })
	sorted := make([]streamRow, len(s))
	for i, k := range keys {
		sorted[i] = s[k.i]
	}
	// Ids sharing a hash: by id, stably.
	for i := 0; i < len(sorted); {
		k := i + 1
		for k < len(sorted) && sorted[k].hash == sorted[i].hash {
			k++
		}
		if k > i+2 || k == i+2 && sorted[i].id != sorted[i+1].id {
			slices.SortStableFunc(sorted[i:k], func(a, b streamRow) int { return strings.Compare(a.id, b.id) })
		}
		i = k
	}
	copy(s, sorted)
}

// adAcc is one ad's part of an hour.
type adAcc struct {
	touched      bool
	final, spend int64
	a, aSpend    int64
	b, bSpend    int64
	aRows        []streamRow
	bIDs         []string
}

func (r *runner) acc(ad int32) *adAcc {
	if int(ad) >= len(r.accs) {
		r.accs = append(r.accs, make([]adAcc, len(r.ads)-len(r.accs))...)
	}
	return &r.accs[ad]
}

// accepted is a click the recount counts in the hour.
type accepted struct {
	hash  uint64
	id    string
	spend int64
	ad    int32
}

func (r *runner) hour(ctx context.Context, h int64) (HourResult, error) {
	o := r.o
	span := r.span()
	for k := range r.cache {
		if k < h-span*eventtime.HourMs {
			delete(r.cache, k)
		}
	}
	target, err := r.load(ctx, h, true)
	if err != nil {
		return HourResult{}, err
	}
	var neigh []*partition
	for d := -span; d <= span; d++ {
		if d == 0 {
			continue
		}
		p, err := r.load(ctx, h+d*eventtime.HourMs, false)
		if err != nil {
			return HourResult{}, err
		}
		if len(p.best) > 0 {
			neigh = append(neigh, p)
		}
	}
	res := HourResult{HourMs: h, Hour: FormatHour(h), Status: "final", Gen: o.Gen, Rows: target.rows,
		Rejected: map[string]int64{latepath.VerdictInvalid: target.invalid,
			latepath.VerdictBeyondHorizon: target.beyond, latepath.VerdictDuplicate: target.copies}}
	if o.NoWrite {
		res.Status = "checked"
	}
	// The recount's clicks of the hour: ids whose earliest copy anywhere in
	// the window lies in this hour. Every list is ordered by (hash, id), so
	// one pass merges them.
	pos := make([]int, len(neigh))
	acc := make([]accepted, 0, len(target.best))
	var touched []int32
	touch := func(ad int32) *adAcc {
		a := r.acc(ad)
		if !a.touched {
			a.touched = true
			touched = append(touched, ad)
		}
		return a
	}
	for i := range target.best {
		t := &target.best[i]
		w := t
		for n, p := range neigh {
			nb := p.best
			k := pos[n]
			for k < len(nb) && idCmp(nb[k].hash, nb[k].id, t.hash, t.id) < 0 {
				k++
			}
			pos[n] = k
			if k < len(nb) && nb[k].hash == t.hash && nb[k].id == t.id && r.better(&nb[k], w) < 0 {
				w = &nb[k]
			}
		}
		if w.event-floorMod(w.event, eventtime.HourMs) != h {
			res.Rejected[latepath.VerdictDuplicate]++ // its earliest copy is counted in another hour
			continue
		}
		acc = append(acc, accepted{hash: t.hash, id: t.id, spend: w.spend, ad: w.ad})
		a := touch(w.ad)
		a.final++
		a.spend += w.spend
		res.Accepted++
	}
	// Match the accepted ids with the rows the stream counted: an id
	// matches the first of its rows (in read order) of the same ad.
	s := target.stream
	k := 0
	for i := range acc {
		x := &acc[i]
		for k < len(s) && idCmp(s[k].hash, s[k].id, x.hash, x.id) < 0 {
			r.unmatchedStream(touch, &s[k])
			k++
		}
		matched := false
		for k < len(s) && s[k].hash == x.hash && s[k].id == x.id {
			if !matched && s[k].ad == x.ad {
				matched = true
			} else {
				r.unmatchedStream(touch, &s[k])
			}
			k++
		}
		if !matched {
			a := touch(x.ad)
			a.b++
			a.bSpend += x.spend
			a.bIDs = append(a.bIDs, x.id)
		}
	}
	for ; k < len(s); k++ {
		r.unmatchedStream(touch, &s[k])
	}

	slices.SortFunc(touched, func(a, b int32) int { return strings.Compare(r.ads[a], r.ads[b]) })
	bucket := sink.HourBucket(h)
	now := o.NowMs
	if now == 0 {
		now = time.Now().UnixMilli()
	}
	var puts []sink.FinalPut
	res.Balanced = true
	defer func() {
		for _, ad := range touched {
			a := r.acc(ad)
			*a = adAcc{aRows: a.aRows[:0], bIDs: a.bIDs[:0]}
		}
	}()
	for _, adIx := range touched {
		a := r.acc(adIx)
		ad := r.ads[adIx]
		ar := AdResult{Ad: ad, Final: a.final, FinalSpend: a.spend, A: a.a, ASpend: a.aSpend, B: a.b, BSpend: a.bSpend}
		// A: the first ids in read order, B: the least ids.
		slices.SortFunc(a.aRows, func(x, y streamRow) int { return cmp.Compare(x.pos, y.pos) })
		for _, sr := range a.aRows[:min(len(a.aRows), o.MaxLoggedIDs)] {
			ar.AIDs = append(ar.AIDs, sr.id)
		}
		slices.Sort(ar.AIDs)
		if len(a.bIDs) > 0 {
			slices.Sort(a.bIDs)
			ar.BIDs = slices.Clone(a.bIDs[:min(len(a.bIDs), o.MaxLoggedIDs)])
		}
		it, ok, err := o.Rows.Get(ctx, sink.Key{Entity: ad, Bucket: bucket})
		if err != nil {
			return res, fmt.Errorf("recount: read row %s/%s: %w", ad, bucket, err)
		}
		if ok {
			if it.Fast.Present {
				ar.Fast, ar.FastSpend = it.Fast.Valid, it.Fast.SpendMicros
			}
			if it.Late.Present {
				ar.Late, ar.LateSpend = it.Late.Valid, it.Late.SpendMicros
			}
		}
		ar.Unexplained = ar.Final - (ar.Fast + ar.Late - ar.A + ar.B)
		ar.UnexplainedSpend = ar.FinalSpend - (ar.FastSpend + ar.LateSpend - ar.ASpend + ar.BSpend)
		ar.Balanced = ar.Unexplained == 0 && ar.UnexplainedSpend == 0
		if !ar.Balanced {
			res.Balanced = false
		}
		if ar.A != 0 || ar.B != 0 || !ar.Balanced {
			o.Logger.Warn("reconcile", "hour", res.Hour, "ad", ad, "fast", ar.Fast, "late", ar.Late, "final", ar.Final,
				"a", ar.A, "b", ar.B, "unexplained", ar.Unexplained, "unexplained_spend_micros", ar.UnexplainedSpend,
				"a_click_ids", ar.AIDs, "b_click_ids", ar.BIDs)
		}
		res.Ads = append(res.Ads, ar)
		puts = append(puts, sink.FinalPut{Key: sink.Key{Entity: ad, Bucket: bucket}, Valid: ar.Final, SpendMicros: ar.FinalSpend, Gen: o.Gen, AtMs: now})
	}
	for _, ar := range res.Ads {
		res.Unexplained += ar.Unexplained
		res.UnexplainedSpend += ar.UnexplainedSpend
	}
	switch {
	case res.Balanced || o.NoWrite:
	case o.AcceptUnbalanced != "":
		o.Logger.Warn("recount: finalising an hour that does not balance, accepted", "hour", res.Hour, "unexplained", res.Unexplained,
			"unexplained_spend_micros", res.UnexplainedSpend, "accepted_by", o.AcceptUnbalanced, "gen", o.Gen)
		res.Reason = "accepted unbalanced: " + o.AcceptUnbalanced
	default:
		// An unexplained difference holds the hour: final_* would bill a
		// number nobody can explain (lake records missing, rows short).
		res.Status = "held"
		res.Reason = (&UnbalancedError{HourMs: h, Unexplained: res.Unexplained, UnexplainedSpend: res.UnexplainedSpend}).Error()
		puts = nil
	}
	if !o.NoWrite && len(puts) > 0 {
		refused, err := o.Rows.PutFinal(ctx, puts)
		if err != nil {
			return res, fmt.Errorf("recount: write final rows of %s: %w", res.Hour, err)
		}
		res.Refused = refused
	}
	if target.misfiled > 0 {
		o.Logger.Warn("recount: rows whose recomputed event hour differs from their partition", "hour", res.Hour, "rows", target.misfiled)
	}
	o.Logger.Info("recount", "hour", res.Hour, "status", res.Status, "gen", o.Gen, "rows", res.Rows, "accepted", res.Accepted,
		"ads", len(res.Ads), "balanced", res.Balanced, "refused_writes", res.Refused)
	r.report(ctx, &res)
	if o.Progress != nil {
		o.Progress(Progress{HourMs: h, HoursDone: r.done + 1, HoursTotal: r.total, Rows: r.rows})
	}
	return res, nil
}

// unmatchedStream counts a row the stream counted that no accepted id
// matched (A).
func (r *runner) unmatchedStream(touch func(int32) *adAcc, s *streamRow) {
	a := touch(s.ad)
	a.a++
	a.aSpend += s.spend
	a.aRows = append(a.aRows, *s)
}

// hkey is a sort key: a hash and the index of its record.
type hkey struct {
	h uint64
	i uint32
}

// sortKeys returns the indexes 0..n-1 with their hashes, ordered by hash,
// stably (equal hashes keep index order): an LSD radix sort, 16 bits a
// pass. The result is valid until the next call.
func (r *runner) sortKeys(n int, hash func(int) uint64) []hkey {
	a := resize(r.keys, n)
	for i := range a {
		a[i] = hkey{h: hash(i), i: uint32(i)}
	}
	if n < 256 {
		slices.SortStableFunc(a, func(x, y hkey) int { return cmp.Compare(x.h, y.h) })
		r.keys = a
		return a
	}
	b := resize(r.keys2, n)
	if r.count == nil {
		r.count = make([]int, 1<<16)
	}
	count := r.count
	for shift := uint(0); shift < 64; shift += 16 {
		clear(count)
		for _, k := range a {
			count[(k.h>>shift)&0xffff]++
		}
		if count[(a[0].h>>shift)&0xffff] == n {
			continue // every key has this digit
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, k := range a {
			d := (k.h >> shift) & 0xffff
			b[count[d]] = k
			count[d]++
		}
		a, b = b, a
	}
	r.keys, r.keys2 = a, b
	return a
}
