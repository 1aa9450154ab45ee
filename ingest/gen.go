package ingest

import (
	"math/rand/v2"
	"strconv"
)

// GenOptions configures the synthetic click generator. Zero fields take the
// defaults noted.
type GenOptions struct {
	Clicks    int64   // clicks to generate; 0 = unbounded
	Ads       int     // distinct ads; default 1,000
	Campaigns int     // distinct campaigns; default 50
	Shards    int     // shards; default 4
	Rate      float64 // clicks per second of arrival time; default 2,000
	StartMs   int64   // arrival time of the first click; default 2026-11-29T10:00:00Z
	Zipf      float64 // skew of the ad distribution (s > 1); 0 = default 1.1; <0 = uniform
	// HotFraction of the clicks go to the hottest ad, ad_0 (the case
	// pre-aggregation exists for); the rest follow Zipf over the others.
	HotFraction float64
	// DelayMeanMs is the mean of the ordinary arrival delay (exponential):
	// device time is arrival − delay. Default 800.
	DelayMeanMs float64
	// TailFraction of clicks arrive late, with a delay uniform in
	// [TailMinMs, TailMaxMs] (a phone that lost signal). Default 0.02,
	// 70 s to 2.5 h (some beyond the 2 h horizon).
	TailFraction         float64
	TailMinMs, TailMaxMs int64
	DupFraction          float64 // resends of an earlier click (same payload, later arrival, any shard); default 0.01
	InvalidFraction      float64 // malformed or invalid lines; default 0.005
	SkewFraction         float64 // device clocks far off (years ahead or behind); default 0.002
	// IdleEveryMs > 0 makes the last shard silent during the second half of
	// every period of that length (idle-shard traffic). Default 0.
	IdleEveryMs int64
	Seed        uint64 // random seed; default 1
}

func (o *GenOptions) ensureDefaults() {
	if o.Ads <= 0 {
		o.Ads = 1000
	}
	if o.Campaigns <= 0 {
		o.Campaigns = 50
	}
	if o.Shards <= 0 {
		o.Shards = 4
	}
	if o.Rate <= 0 {
		o.Rate = 2000
	}
	if o.StartMs == 0 {
		o.StartMs = 1_795_946_400_000 // 2026-11-29T10:00:00Z
	}
	if o.Zipf == 0 {
		o.Zipf = 1.1
	}
	if o.DelayMeanMs <= 0 {
		o.DelayMeanMs = 800
	}
	if o.TailMinMs <= 0 {
		o.TailMinMs = 70_000
	}
	if o.TailMaxMs <= o.TailMinMs {
		o.TailMaxMs = 9_000_000
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// Gen produces a deterministic stream of click lines in arrival order, in
// the file-source format (the click fields plus "shard" and "arrival_ms").
// Not safe for concurrent use.
type Gen struct {
	o       GenOptions
	rng     *rand.Rand
	zipf    *rand.Zipf
	n       int64
	sent    []genClick // a reservoir of earlier clicks, for duplicates
	arrival float64
}

type genClick struct {
	id, ad, camp, dev  string
	imp, device, spend int64
	shard              int
}

// NewGen returns a generator.
func NewGen(o GenOptions) *Gen {
	o.ensureDefaults()
	g := &Gen{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)), arrival: float64(o.StartMs)}
	if o.Zipf > 1 {
		g.zipf = rand.NewZipf(g.rng, o.Zipf, 1, uint64(o.Ads-1))
	}
	return g
}

// Generated returns the number of lines produced so far.
func (g *Gen) Generated() int64 { return g.n }

// Next appends the next line (no newline) to dst and returns it with its
// arrival time; ok is false once Clicks lines have been produced.
func (g *Gen) Next(dst []byte) (line []byte, arrivalMs int64, ok bool) {
	if g.o.Clicks > 0 && g.n >= g.o.Clicks {
		return dst, 0, false
	}
	g.n++
	// Arrivals are evenly spaced with a little jitter, never going back.
	g.arrival += 1000 / g.o.Rate * (0.5 + g.rng.Float64())
	arr := int64(g.arrival)
	shard := g.pickShard(arr)
	r := g.rng.Float64()
	switch {
	case r < g.o.InvalidFraction:
		return g.invalid(dst, arr, shard), arr, true
	case r < g.o.InvalidFraction+g.o.DupFraction && len(g.sent) > 0:
		c := g.sent[g.rng.IntN(len(g.sent))]
		if g.rng.IntN(2) == 0 {
			c.shard = shard
		}
		return appendClick(dst, &c, arr), arr, true
	}
	var delay int64
	if g.rng.Float64() < g.o.TailFraction {
		delay = g.o.TailMinMs + g.rng.Int64N(g.o.TailMaxMs-g.o.TailMinMs)
	} else {
		delay = int64(g.rng.ExpFloat64() * g.o.DelayMeanMs)
	}
	event := arr - delay
	c := genClick{
		id:    "c" + strconv.FormatInt(g.n, 36) + "-" + strconv.FormatUint(g.rng.Uint64()&0xffffff, 36),
		ad:    "ad_" + strconv.Itoa(g.pickAd()),
		dev:   "d_" + strconv.Itoa(g.rng.IntN(1_000_000)),
		imp:   event - g.rng.Int64N(30_000),
		spend: 1000 + g.rng.Int64N(500_000),
		shard: shard,
	}
	c.camp = "camp_" + strconv.Itoa(hashMod(c.ad, g.o.Campaigns))
	c.device = event
	if g.rng.Float64() < g.o.SkewFraction {
		// A device clock years off: 2031 ahead, or the 1970s behind.
		if g.rng.IntN(2) == 0 {
			c.device = 1_950_000_000_000 + g.rng.Int64N(1e9)
		} else {
			c.device = g.rng.Int64N(1e9)
		}
	}
	if len(g.sent) < 4096 {
		g.sent = append(g.sent, c)
	} else {
		g.sent[g.rng.IntN(len(g.sent))] = c
	}
	return appendClick(dst, &c, arr), arr, true
}

func (g *Gen) pickAd() int {
	if g.o.HotFraction > 0 && g.o.Ads > 1 {
		if g.rng.Float64() < g.o.HotFraction {
			return 0
		}
		if g.zipf != nil {
			return 1 + int(g.zipf.Uint64())%(g.o.Ads-1)
		}
		return 1 + g.rng.IntN(g.o.Ads-1)
	}
	if g.zipf != nil {
		return int(g.zipf.Uint64())
	}
	return g.rng.IntN(g.o.Ads)
}

func (g *Gen) pickShard(arr int64) int {
	n := g.o.Shards
	s := g.rng.IntN(n)
	if g.o.IdleEveryMs > 0 && n > 1 && (arr-g.o.StartMs)%g.o.IdleEveryMs >= g.o.IdleEveryMs/2 && s == n-1 {
		s = g.rng.IntN(n - 1)
	}
	return s
}

func (g *Gen) invalid(dst []byte, arr int64, shard int) []byte {
	c := genClick{id: "bad" + strconv.FormatInt(g.n, 36), ad: "ad_1", camp: "camp_1", dev: "d_1", imp: arr - 1000, device: arr - 500, spend: 100, shard: shard}
	switch g.rng.IntN(4) {
	case 0:
		line := appendClick(dst, &c, arr)
		return line[:len(line)/2] // malformed JSON
	case 1:
		c.spend = -5
	case 2:
		c.ad = ""
	default:
		c.imp = arr + 3_600_000 // impression after arrival
	}
	return appendClick(dst, &c, arr)
}

func appendClick(dst []byte, c *genClick, arr int64) []byte {
	dst = append(dst, `{"click_id":"`...)
	dst = append(dst, c.id...)
	dst = append(dst, `","ad_id":"`...)
	dst = append(dst, c.ad...)
	dst = append(dst, `","campaign_id":"`...)
	dst = append(dst, c.camp...)
	dst = append(dst, `","device_id":"`...)
	dst = append(dst, c.dev...)
	dst = append(dst, `","impression_ms":`...)
	dst = strconv.AppendInt(dst, c.imp, 10)
	dst = append(dst, `,"device_ms":`...)
	dst = strconv.AppendInt(dst, c.device, 10)
	dst = append(dst, `,"spend_micros":`...)
	dst = strconv.AppendInt(dst, c.spend, 10)
	dst = append(dst, `,"shard":"S`...)
	dst = strconv.AppendInt(dst, int64(c.shard), 10)
	dst = append(dst, `","arrival_ms":`...)
	dst = strconv.AppendInt(dst, arr, 10)
	return append(dst, '}')
}

func hashMod(s string, n int) int {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return int(h % uint32(max(n, 1)))
}
