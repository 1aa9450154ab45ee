package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

const recountSummary = `Recounts hours from the raw-click lake and writes final_valid,
final_spend_micros, final_gen and final_at on the hour rows, then prints the
reconciliation of each (ad, hour): fast + late (the stream's rows), A (counted
by the stream, rejected by the recount), B (accepted by the recount, not
counted by the stream) and final, with final = fast + late - A + B checked.

An hour is final once the job watermark of the latest checkpoint (under
--data/checkpoints, or in --checkpoints s3://…; or --watermark) has passed
hour end + horizon + margin; an hour that is not is refused unless
--force. A recount under a newer --gen replaces final_*; one under an
older --gen is refused. The embedded store must not be in use by a
running job.

Hours: --hour 2026-11-29T10Z, or --from/--to (both included), or
--all-ready (every hour of the lake that is final).`

const reconcileSummary = `Reconciles hours without writing: recounts them from the raw-click lake
and prints, per (ad, hour), fast, late, A, B, final and whether
final = fast + late - A + B holds. Exits 1 if any (ad, hour) does not balance.`

type recountFlags struct {
	hour, from, to  string
	allReady, force bool
	gen             int64
	data, lake      string
	checkpoints     string
	watermark       string
	jsonOut         bool
	horizonMs       int64
	allowanceMs     int64
	marginMs        int64
	maxIDs          int
	logLevel        string
	logFormat       string
	sf              sinkFlags
}

func (f *recountFlags) register(fs *flag.FlagSet, write bool) {
	fs.StringVar(&f.hour, "hour", "", "the hour to recount, like 2026-11-29T10Z")
	fs.StringVar(&f.from, "from", "", "first hour of a range (included)")
	fs.StringVar(&f.to, "to", "", "last hour of a range (included)")
	fs.BoolVar(&f.allReady, "all-ready", false, "every hour of the lake that is final")
	fs.BoolVar(&f.force, "force", false, "recount hours that are not final yet")
	if write {
		fs.Int64Var(&f.gen, "gen", 1, "generation written as final_gen (a newer one replaces final_*, an older one is refused)")
	}
	fs.StringVar(&f.data, "data", "./adclick-data", "data directory of the job (checkpoints, embedded store, lake)")
	fs.StringVar(&f.lake, "lake", "", "the raw-click lake: s3://BUCKET/PREFIX (endpoint and credentials from the AWS SDK's variables) or a folder; default DATA/lake")
	fs.StringVar(&f.checkpoints, "checkpoints", "", "the job's checkpoints in s3://BUCKET/PREFIX (as given to run): the watermark is the latest one's; default DATA/checkpoints")
	fs.StringVar(&f.watermark, "watermark", "", "the job watermark (RFC 3339 time or Unix ms), instead of the latest checkpoint's")
	fs.BoolVar(&f.jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.Int64Var(&f.horizonMs, "horizon-ms", 7_200_000, "acceptance horizon after the impression, ms (as the job's)")
	fs.Int64Var(&f.allowanceMs, "allowance-ms", 5_000, "out-of-orderness allowance, ms (as the job's)")
	fs.Int64Var(&f.marginMs, "margin-ms", 600_000, "margin past hour end + horizon before an hour is final, ms")
	fs.IntVar(&f.maxIDs, "max-ids", 20, "click ids listed per (ad, hour) for A and for B")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	f.sf.register(fs, false)
}

func cmdRecount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return recountMain(ctx, "recount", recountSummary, true, args, stdout, stderr)
}

func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return recountMain(ctx, "reconcile", reconcileSummary, false, args, stdout, stderr)
}

func recountMain(ctx context.Context, name, summary string, write bool, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(name, summary, stderr)
	var f recountFlags
	f.register(fs, write)
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	modes := 0
	for _, set := range []bool{f.hour != "", f.from != "" || f.to != "", f.allReady} {
		if set {
			modes++
		}
	}
	if modes != 1 {
		return usageError{errors.New("give exactly one of --hour, --from/--to or --all-ready")}
	}
	store, err := openLake(ctx, f.lake, f.data)
	if err != nil {
		return err
	}
	wmFn, err := watermarkFunc(ctx, f.watermark, f.checkpoints, f.data)
	if err != nil {
		return err
	}
	if wmFn == nil && !f.force {
		where := filepath.Join(f.data, "checkpoints")
		if f.checkpoints != "" {
			where = f.checkpoints
		}
		return fmt.Errorf("no checkpoint in %s: the job watermark is unknown; pass --watermark, or --force", where)
	}
	rows, closeRows, err := openRows(ctx, &f.sf, f.data)
	if err != nil {
		return err
	}
	defer closeRows()

	o := recount.Options{Store: store, Rows: rows, Gen: f.gen, Watermark: wmFn, Force: f.force,
		Judge:    recount.Judge{HorizonMs: f.horizonMs, AllowanceMs: &f.allowanceMs},
		MarginMs: f.marginMs, MaxLoggedIDs: f.maxIDs, Logger: log}
	if o.Hours, err = selectHours(ctx, &f, store, wmFn); err != nil {
		return err
	}
	if len(o.Hours) == 0 {
		log.Info("no hour to recount")
		return nil
	}
	var bar *progressbar.ProgressBar
	if isTerminal(stderr) {
		bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(stderr), progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("rows"), progressbar.OptionShowIts(), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetDescription(fmt.Sprintf("%s %d hours", name, len(o.Hours))), progressbar.OptionClearOnFinish())
		o.Progress = func(p recount.Progress) {
			bar.Describe(fmt.Sprintf("%s %s (%d/%d hours)", name, recount.FormatHour(p.HourMs), p.HoursDone, p.HoursTotal))
			bar.Set64(p.Rows)
		}
	} else {
		o.Progress = func(p recount.Progress) {
			log.Debug("progress", "hour", recount.FormatHour(p.HourMs), "hours_done", p.HoursDone, "hours", p.HoursTotal, "rows", p.Rows)
		}
	}
	var results []recount.HourResult
	if write {
		results, err = recount.Run(ctx, o)
	} else {
		results, err = recount.Reconcile(ctx, o)
	}
	if bar != nil {
		bar.Finish()
	}
	if perr := printResults(stdout, results, f.jsonOut); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	for _, r := range results {
		if !r.Balanced {
			return fmt.Errorf("hour %s does not balance: final != fast + late - A + B for some ads (see the table)", r.Hour)
		}
	}
	return nil
}

func printResults(w io.Writer, results []recount.HourResult, asJSON bool) error {
	if asJSON {
		if results == nil {
			results = []recount.HourResult{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return recount.WriteTable(w, results)
}

// openLake opens the lake: S3 for an s3:// URL, else a folder (default
// DATA/lake).
func openLake(ctx context.Context, lake, data string) (recount.Store, error) {
	if strings.HasPrefix(lake, "s3://") {
		bucket, prefix, err := recount.ParseS3URL(lake)
		if err != nil {
			return nil, usageError{err}
		}
		cfg, err := loadAWS(ctx)
		if err != nil {
			return nil, err
		}
		return recount.NewS3(recount.NewS3Client(cfg), bucket, prefix), nil
	}
	dir := lake
	if dir == "" {
		dir = filepath.Join(data, "lake")
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("no lake in %s: %w", dir, err)
	}
	return recount.NewFolder(dir)
}

// openRows opens the row store: DynamoDB with --sink dynamodb:TABLE, else
// the embedded store under DATA/store.
func openRows(ctx context.Context, sf *sinkFlags, data string) (sink.Rows, func(), error) {
	table, isDynamo, err := sf.table()
	if err != nil {
		return nil, nil, err
	}
	if isDynamo {
		st, err := openDynamo(ctx, table, nil)
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
	p := filepath.Join(data, "store")
	if _, err := os.Stat(p); err != nil {
		return nil, nil, fmt.Errorf("no embedded store in %s: %w", data, err)
	}
	st, err := embedded.Open(p, embedded.Options{})
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}

// watermarkFunc returns the job watermark: --watermark, or the watermark of
// the latest complete checkpoint in --checkpoints or under DATA/checkpoints
// (nil if there is none).
func watermarkFunc(ctx context.Context, flagVal, checkpoints, data string) (func(context.Context) (int64, error), error) {
	if flagVal != "" {
		ms, err := parseTimeMs(flagVal)
		if err != nil {
			return nil, usageError{fmt.Errorf("--watermark %q: %w", flagVal, err)}
		}
		return func(context.Context) (int64, error) { return ms, nil }, nil
	}
	var wm int64
	var ok bool
	var err error
	if checkpoints != "" {
		wm, ok, err = remoteCheckpointWatermark(ctx, checkpoints)
	} else {
		wm, ok, err = checkpointWatermark(data)
	}
	if err != nil || !ok {
		return nil, err
	}
	return func(context.Context) (int64, error) { return wm, nil }, nil
}

// remoteCheckpointWatermark reads the watermark of the newest complete
// checkpoint in an s3:// checkpoint store (its meta.json only).
func remoteCheckpointWatermark(ctx context.Context, url string) (int64, bool, error) {
	if !strings.HasPrefix(url, "s3://") {
		return 0, false, usageError{fmt.Errorf("--checkpoints %q: want s3://BUCKET/PREFIX (the default reads DATA/checkpoints)", url)}
	}
	st, err := openCheckpoints(ctx, url, nil)
	if err != nil {
		return 0, false, err
	}
	id, ok, err := st.Latest(ctx, ckptstore.Checkpoint)
	if err != nil || !ok {
		return 0, false, err
	}
	return metaWatermark(id)(st.ReadFile(ctx, id, ckptstore.Checkpoint, "meta.json"))
}

// metaWatermark returns a function that takes the result of reading
// checkpoint id's meta.json and returns the watermark it records.
func metaWatermark(id int64) func(b []byte, err error) (int64, bool, error) {
	return func(b []byte, err error) (int64, bool, error) {
		if err != nil {
			return 0, false, fmt.Errorf("read checkpoint %d: %w", id, err)
		}
		var m struct {
			Watermark *int64 `json:"watermark"`
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Watermark == nil {
			return 0, false, fmt.Errorf("checkpoint %d: meta.json has no watermark", id)
		}
		return *m.Watermark, true, nil
	}
}

// checkpointWatermark reads the watermark of the newest complete checkpoint
// (DATA/checkpoints/ckpt-<id>/meta.json).
func checkpointWatermark(data string) (int64, bool, error) {
	dir := filepath.Join(data, "checkpoints")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read checkpoints: %w", err)
	}
	var ids []int64
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), "ckpt-")
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "meta.json")); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	id := slices.Max(ids)
	return metaWatermark(id)(os.ReadFile(filepath.Join(dir, fmt.Sprintf("ckpt-%012d", id), "meta.json")))
}

func parseTimeMs(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, errors.New("want an RFC 3339 time or Unix ms")
	}
	return t.UnixMilli(), nil
}

// selectHours returns the hours the flags name.
func selectHours(ctx context.Context, f *recountFlags, store recount.Store, wmFn func(context.Context) (int64, error)) ([]int64, error) {
	switch {
	case f.hour != "":
		h, err := recount.ParseHour(f.hour)
		if err != nil {
			return nil, usageError{err}
		}
		return []int64{h}, nil
	case f.allReady:
		var wm int64 = 1<<63 - 1
		if wmFn != nil {
			var err error
			if wm, err = wmFn(ctx); err != nil {
				return nil, err
			}
		}
		var hs []int64
		err := recount.Hours(ctx, store, 0, func(h int64) error {
			if !f.force && recount.ReadyAt(h, f.horizonMs, f.marginMs) > wm {
				return recount.ErrStopList
			}
			hs = append(hs, h)
			return nil
		})
		return hs, err
	}
	if f.from == "" || f.to == "" {
		return nil, usageError{errors.New("--from and --to go together")}
	}
	from, err := recount.ParseHour(f.from)
	if err != nil {
		return nil, usageError{err}
	}
	to, err := recount.ParseHour(f.to)
	if err != nil {
		return nil, usageError{err}
	}
	if to < from || (to-from)/recount.HourMs > 24*366 {
		return nil, usageError{fmt.Errorf("--from %s --to %s: want from <= to, at most a year apart", f.from, f.to)}
	}
	var hs []int64
	for h := from; h <= to; h += recount.HourMs {
		hs = append(hs, h)
	}
	return hs, nil
}
