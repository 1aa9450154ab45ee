package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/adclick/adclick/api"
)

// printStatus writes the job's status for people: one line per topic,
// then a table of the shards, then the hints.
func printStatus(w io.Writer, s api.StatusResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	state := "running"
	switch {
	case s.Done:
		state = "stopped"
	case !s.Ready:
		state = "restoring (not ready)"
	}
	from := "started with empty state"
	if s.RestoredCheckpoint > 0 {
		from = fmt.Sprintf("restored from checkpoint %d", s.RestoredCheckpoint)
	}
	fmt.Fprintf(tw, "job\tgeneration %d, parallelism %d, source %s, %s: %s\n", s.JobGen, s.Parallelism, s.Source, from, state)
	wm := "none yet"
	if s.Watermark != nil {
		wm = *s.Watermark + " (data complete through)"
		if s.WatermarkLagSeconds != nil {
			wm += ", lag " + human(time.Duration(*s.WatermarkLagSeconds*float64(time.Second)))
		}
	}
	fmt.Fprintf(tw, "watermark\t%s\n", wm)
	fmt.Fprintf(tw, "records\t%d read, %d invalid\n", s.Records, s.Invalid)
	ck := "none yet"
	if c := s.LastCheckpoint; c != nil {
		ck = fmt.Sprintf("%d, taken %s", c.ID, c.TakenAt)
		if c.AgeMs != nil {
			ck += fmt.Sprintf(" (%s ago)", human(time.Duration(*c.AgeMs)*time.Millisecond))
		}
		ck += fmt.Sprintf(", %d ms, %s", c.DurationMs, sizeOf(c.SizeBytes))
		if c.Final {
			ck += ", final"
		}
	}
	if k := s.Checkpoints; k.Failed != nil && k.FailedSinceLast != nil && *k.FailedSinceLast > 0 {
		ck += fmt.Sprintf("; %d failed attempts since", *k.FailedSinceLast)
	}
	fmt.Fprintf(tw, "checkpoint\t%s\n", ck)
	if lr := s.LateRate; lr != nil {
		late := fmt.Sprintf("%.2f/s over the last %s", lr.LatePerSecond, human(time.Duration(lr.WindowSeconds*float64(time.Second))))
		if lr.Fraction != nil {
			late += fmt.Sprintf(", %.2f%% of valid clicks", *lr.Fraction*100)
		}
		fmt.Fprintf(tw, "late clicks\t%s\n", late)
	}
	if sinks := sinkLine(s.Sinks); sinks != "" {
		fmt.Fprintf(tw, "sinks\t%s\n", sinks)
	}
	fmt.Fprintf(tw, "billing\t%s\n", billingLine(s.Billing))
	idle, closed := 0, 0
	for _, sh := range s.Shards {
		switch {
		case sh.Closed:
			closed++
		case sh.Idle:
			idle++
		}
	}
	fmt.Fprintf(tw, "shards\t%d (%d active, %d idle, %d closed)\n", len(s.Shards), len(s.Shards)-idle-closed, idle, closed)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Shards) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SHARD\tWATERMARK\tLAG\tVS JOB\tSTATE\tCONSUMER LAG")
		for _, sh := range s.Shards {
			wm, lag, vs := "none yet", "-", "-"
			if sh.WatermarkMs != nil {
				wm = *sh.Watermark
				if s.ProcessingMs != nil {
					lag = human(time.Duration(*s.ProcessingMs-*sh.WatermarkMs) * time.Millisecond)
				}
				if s.WatermarkMs != nil {
					vs = signed(time.Duration(*sh.WatermarkMs-*s.WatermarkMs) * time.Millisecond)
				}
			}
			st := "active"
			switch {
			case sh.Closed:
				st = "closed"
			case sh.Idle:
				st = "idle (left out of the watermark)"
			}
			cl := "-"
			if sh.ConsumerLagMs != nil {
				cl = human(time.Duration(*sh.ConsumerLagMs) * time.Millisecond)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sh.ID, wm, lag, vs, st, cl)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(s.Hints) > 0 {
		fmt.Fprintln(w)
		for _, h := range s.Hints {
			fmt.Fprintln(w, h)
		}
	}
	return nil
}

// sinkLine summarises what the job's metrics say of its stores; "" when
// they say nothing.
func sinkLine(k api.SinkHealth) string {
	var parts []string
	count := func(name string, v *int64) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s %d", name, *v))
		}
	}
	up := func(name string, v *bool) {
		if v != nil {
			s := "up"
			if !*v {
				s = "DOWN"
			}
			parts = append(parts, name+" "+s)
		}
	}
	count("row writes", k.RowWrites)
	count("retried", k.Retries)
	count("refused", k.RefusedWrites)
	count("DynamoDB throttles", k.DynamoThrottles)
	up("running totals", k.TotalsStoreUp)
	up("Valkey", k.ValkeyUp)
	return strings.Join(parts, ", ")
}

// billingLine says which hours are closed, ready for the recount and
// recounted.
func billingLine(b api.Billing) string {
	or := func(p *string, none string) string {
		if p == nil {
			return none
		}
		return *p
	}
	ready := or(b.ReadyThrough, "none yet")
	if b.HorizonMs == nil {
		ready = "not known before the first checkpoint"
	}
	return "closed through " + or(b.ClosedThrough, "none yet") + ", ready for the recount through " + ready +
		", recounted through " + or(b.RecountedThrough, "not known to the job") + " (only final hours are billable)"
}

// human rounds a duration for reading: to 100 ms below 10 s, to the
// second below an hour, to the minute above.
func human(d time.Duration) string {
	switch {
	case d < 0:
		if h := human(-d); h != "0s" {
			return "-" + h
		}
		return "0s"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// signed is human with a + on a duration that does not round to 0.
func signed(d time.Duration) string {
	h := human(d)
	if d > 0 && h != "0s" {
		return "+" + h
	}
	return h
}

func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}
