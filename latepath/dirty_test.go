package latepath

import "testing"

func TestMarkAllDirtyEmitsEveryTotalOnce(t *testing.T) {
	l := New(7_200_000)
	l.Add("ad_7", 3_600_000*10+5, 1, 100)
	l.Add("ad_9", 3_600_000*11+5, 2, 200)
	l.Flush(func(Total) {})
	n := 0
	l.Flush(func(Total) { n++ })
	if n != 0 {
		t.Fatalf("second Flush emitted %d totals, want 0", n)
	}
	l.MarkAllDirty()
	var got []Total
	l.Flush(func(tt Total) { got = append(got, tt) })
	if len(got) != 2 || got[0].Ad != "ad_7" || got[0].Valid != 1 || got[1].Ad != "ad_9" || got[1].Valid != 2 {
		t.Fatalf("after MarkAllDirty got %+v, want ad_7 (1) and ad_9 (2)", got)
	}
}
