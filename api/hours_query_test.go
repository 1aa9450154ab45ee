package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
	"github.com/adclick/adclick/sink/sinktest"
)

// rowsJob is the fake job over another row store.
type rowsJob struct {
	*fakeJob
	rows sink.Rows
}

func (j rowsJob) Rows() sink.Rows { return j.rows }

// noScan is a row store that refuses Scan: GET /v1/hours/{hour} must read
// the hour's rows through the bucket index, not the whole table.
type noScan struct {
	sink.Rows
	scans atomic.Int64
}

func (n *noScan) Scan(context.Context, func(sink.Item) error) error {
	n.scans.Add(1)
	return errors.New("test: the table must not be scanned for a page of an hour")
}

// fillHours writes hour rows of ads ad_000…ad_{n-1} for the hours 09, 10
// and 11 of 2026-11-29, minute rows of hour 10, and an hour-10 row that
// only the recount wrote; it returns the ads of hour 10 in order.
func fillHours(t testing.TB, rows sink.Rows, n int) []string {
	t.Helper()
	ctx := context.Background()
	var puts []sink.Put
	var want []string
	for i := range n {
		ad := fmt.Sprintf("ad_%03d", (i*37)%n) // not in ad order
		for _, h := range []string{"09", "10", "11"} {
			puts = append(puts, sink.Put{Key: sink.Key{Entity: ad, Bucket: "H2026-11-29T" + h + "Z"}, Writer: sink.Fast,
				Valid: int64(i), SpendMicros: int64(i) * 100, Epoch: 40, Gen: 7})
		}
		for m := range 5 {
			puts = append(puts, sink.Put{Key: sink.Key{Entity: ad, Bucket: fmt.Sprintf("M2026-11-29T10:%02dZ", m)}, Writer: sink.Fast,
				Valid: 1, SpendMicros: 100, Epoch: 40, Gen: 7})
		}
		want = append(want, ad)
	}
	if refused, err := rows.Put(ctx, puts); err != nil || refused != 0 {
		t.Fatalf("Put = %d, %v", refused, err)
	}
	if _, err := rows.PutFinal(ctx, []sink.FinalPut{{Key: sink.Key{Entity: "ad_zzz", Bucket: "H2026-11-29T10Z"}, Valid: 1, Gen: 1, AtMs: 1}}); err != nil {
		t.Fatalf("PutFinal: %v", err)
	}
	want = append(want, "ad_zzz")
	slices.Sort(want)
	return want
}

// pageThrough reads GET /v1/hours/2026-11-29T10Z page after page and
// returns the ads in the order served and the number of pages.
func pageThrough(t *testing.T, h http.Handler, limit int) ([]string, int) {
	t.Helper()
	var ads []string
	pages := 0
	for cursor := ""; ; {
		path := fmt.Sprintf("/v1/hours/2026-11-29T10Z?limit=%d", limit)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.1:8080"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200\n%s", path, rec.Code, rec.Body.String())
		}
		var page HourPage
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		pages++
		if len(page.Rows) > limit {
			t.Fatalf("GET %s: %d rows, want at most %d", path, len(page.Rows), limit)
		}
		for _, r := range page.Rows {
			if r.Hour != "2026-11-29T10Z" {
				t.Fatalf("GET %s: a row of hour %s", path, r.Hour)
			}
			ads = append(ads, r.Ad)
		}
		if page.NextCursor == "" {
			return ads, pages
		}
		if len(page.Rows) != limit {
			t.Fatalf("GET %s: %d rows and a next cursor, want a full page of %d", path, len(page.Rows), limit)
		}
		cursor = page.NextCursor
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
	}
}

// TestHourPagesQueryTheBucket pages through an hour on the in-memory and
// the embedded store, which refuse to be scanned: every page is answered
// from the bucket index, complete and in ad order.
func TestHourPagesQueryTheBucket(t *testing.T) {
	stores := map[string]func(t *testing.T) sink.Rows{
		"memory": func(*testing.T) sink.Rows { return sinktest.NewMemRows() },
		"embedded": func(t *testing.T) sink.Rows {
			st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			rows := &noScan{Rows: open(t)}
			want := fillHours(t, rows, 50)
			s, err := New(rowsJob{newFakeJob(t), rows}, Options{Addr: "127.0.0.1:0", SampleEvery: -1, NoOperator: true,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, c := range []struct{ limit, pages int }{{7, 8}, {17, 3}, {51, 1}, {1000, 1}} {
				got, pages := pageThrough(t, s, c.limit)
				if !slices.Equal(got, want) {
					t.Fatalf("limit %d: ads %v, want %v", c.limit, got, want)
				}
				if pages != c.pages {
					t.Errorf("limit %d: %d pages, want %d", c.limit, pages, c.pages)
				}
			}
			if n := rows.scans.Load(); n != 0 {
				t.Errorf("the hours endpoint scanned the table %d times, want 0", n)
			}
		})
	}
}
