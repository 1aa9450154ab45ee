package recount

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
)

// Reconcile is Run without writing: it recounts the hours from the lake and
// reconciles them with their rows, leaving final_* alone.
func Reconcile(ctx context.Context, o Options) ([]HourResult, error) {
	o.NoWrite = true
	return Run(ctx, o)
}

// WriteTable writes results as a table, one line per (ad, hour) and a total
// line per hour.
func WriteTable(w io.Writer, results []HourResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hour\tad\tfast\tlate\tA\tB\tfinal\tunexplained\tspend final\tbalanced\t")
	for _, r := range results {
		if r.Status == "not_final" {
			fmt.Fprintf(tw, "%s\t-\t\t\t\t\t\t\t\tnot final\t\n", r.Hour)
			continue
		}
		var t AdResult
		for _, a := range r.Ads {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Hour, a.Ad, a.Fast, a.Late, a.A, a.B, a.Final,
				a.Unexplained, a.FinalSpend, yesNo(a.Balanced))
			t.Fast += a.Fast
			t.Late += a.Late
			t.A += a.A
			t.B += a.B
			t.Final += a.Final
			t.Unexplained += a.Unexplained
			t.FinalSpend += a.FinalSpend
		}
		fmt.Fprintf(tw, "%s\t(all %d ads)\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Hour, len(r.Ads), t.Fast, t.Late, t.A, t.B, t.Final,
			t.Unexplained, t.FinalSpend, yesNo(r.Balanced))
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
