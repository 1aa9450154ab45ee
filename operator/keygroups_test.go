package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/state"
	"github.com/adclick/adclick/windowing"
)

// Pipelines that split the key groups between them see the watermarks a
// pipeline owning everything sees, route between them exactly its clicks,
// each to one of them, and log each invalid record once.
func TestSourceKeyGroupsPartitionTheClicks(t *testing.T) {
	ranges := []windowing.KeyGroups{{From: 0, To: 40}, {From: 40, To: 41}, {From: 41, To: 128}}
	newSrc := func(r windowing.KeyGroups) *Source {
		s, err := NewSource(SourceOptions{Pres: 3, BatchSize: 4, KeyGroups: r,
			Watermarks: ingest.WatermarkOptions{AllowanceMs: 1_000, IntervalMs: 200}})
		if err != nil {
			t.Fatal(err)
		}
		s.Start(day)
		s.AddShard("s0", day)
		s.AddShard("s1", day)
		return s
	}
	all := newSrc(windowing.KeyGroups{})
	parts := make([]*Source, len(ranges))
	for i, r := range ranges {
		parts[i] = newSrc(r)
	}
	type got struct {
		clicks  []string // "ad/id" in the order sent
		invalid []string
		wms     []int64
	}
	collect := func(s *Source, g *got) {
		for _, snd := range s.Ready().Sends {
			for _, c := range snd.Msg.Clicks {
				g.clicks = append(g.clicks, c.AdID+"/"+c.ClickID)
			}
			if snd.To == 0 && snd.Msg.Kind == Watermark {
				g.wms = append(g.wms, snd.Msg.Wm)
			}
		}
		for _, r := range s.Ready().Lake {
			g.invalid = append(g.invalid, r.AdID+"/"+r.ClickID)
		}
		s.Advance()
	}
	var wantAll got
	gotParts := make([]got, len(parts))
	srcs := append([]*Source{all}, parts...)
	for n := range 600 {
		ad := fmt.Sprintf("ad-%d", n%37)
		c := ingest.Click{ClickID: fmt.Sprintf("c%d", n), AdID: ad, Shard: []string{"s0", "s1"}[n%2], EventMs: day + int64(n)*50}
		for i, s := range srcs {
			cc := c
			for s.NextTick() <= day+int64(n)*50 {
				s.Tick()
			}
			s.Move(day + int64(n)*50)
			if n%50 == 7 {
				logged := s.Reject(&cc, ingest.Reason("bad_spend"), nil)
				if want := i == 0 || ranges[i-1].Owns(ad); logged != want {
					t.Fatalf("source %d: Reject of %s logged=%v, want %v", i, ad, logged, want)
				}
			} else {
				s.Click(&cc)
			}
			s.Flush()
			if i == 0 {
				collect(s, &wantAll)
			} else {
				collect(s, &gotParts[i-1])
			}
		}
	}
	var union, invalid []string
	var notOwned int64
	for i, g := range gotParts {
		if !slices.Equal(g.wms, wantAll.wms) {
			t.Errorf("range %v: watermarks %v, want those of the whole job %v", ranges[i], g.wms, wantAll.wms)
		}
		for _, c := range g.clicks {
			ad, _, _ := strings.Cut(c, "/")
			if !ranges[i].Owns(ad) {
				t.Errorf("range %v received %s, an ad of key group %d", ranges[i], c, windowing.KeyGroup(ad))
			}
		}
		union = append(union, g.clicks...)
		invalid = append(invalid, g.invalid...)
		notOwned += parts[i].NotOwned()
	}
	if len(wantAll.wms) < 10 {
		t.Fatalf("only %d watermarks: the test does not exercise them", len(wantAll.wms))
	}
	slices.Sort(union)
	slices.Sort(invalid)
	want := slices.Sorted(slices.Values(wantAll.clicks))
	if !slices.Equal(union, want) {
		t.Errorf("the ranges received %d clicks, the whole job %d; they differ", len(union), len(want))
	}
	if wantInv := slices.Sorted(slices.Values(wantAll.invalid)); !slices.Equal(invalid, wantInv) {
		t.Errorf("invalid records logged by the ranges %v, by the whole job %v", invalid, wantInv)
	}
	// Each record is someone else's in the other two ranges.
	if total := int64(len(want) + len(wantAll.invalid)); notOwned != 2*total {
		t.Errorf("NotOwned summed to %d, want %d (each of %d records dropped by two ranges)", notOwned, 2*total, total)
	}
	if all.NotOwned() != 0 {
		t.Errorf("the whole job dropped %d records", all.NotOwned())
	}
}

func TestNewSourceRefusesABadRange(t *testing.T) {
	for _, r := range []windowing.KeyGroups{{From: 4, To: 4}, {From: 10, To: 200}, {From: -2, To: 3}} {
		if _, err := NewSource(SourceOptions{Pres: 1, KeyGroups: r}); err == nil {
			t.Errorf("NewSource with key groups %v: no error", r)
		}
	}
}

// The pre-aggregators' dedup store prefetches: state.Dedup is a
// Prefetcher (a change of its signature would silently turn prefetching
// off).
var _ Prefetcher = (*state.Dedup)(nil)
