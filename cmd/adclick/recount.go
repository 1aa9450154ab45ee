package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/adclick/adclick/preagg"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/recount/s3lake"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

const recountSummary = `Recounts hours from the raw-click lake and writes final_valid,
final_spend_micros, final_gen and final_at on the hour rows, then prints the
reconciliation of each (ad, hour): fast + late (the stream's rows), A (counted
by the stream, rejected by the recount), B (accepted by the recount, not
counted by the stream) and final, with final = fast + late - A + B checked.

Clicks are judged with the job's horizon and allowance, read from its
latest complete checkpoint (under --data/checkpoints, or in --checkpoints
s3://…); --horizon-ms or --allowance-ms that differ from them are refused
unless --force-settings (a recount with other settings than the stream's
writes wrong final_* that still balance). Without a checkpoint the flags
are used as given.

An hour is final once the job watermark of that checkpoint (or
--watermark) has passed hour end + horizon + margin; an hour that is not
is refused unless --force. An hour whose reconciliation leaves an
unexplained difference is held: no final_* is written (billing keeps it
provisional) and the command exits 1 naming the hour and the difference;
--accept-unbalanced "WHO: WHY" finalises it anyway (runbooks/recount-
mismatch.md). A recount under a newer --gen replaces
final_*; one under an older --gen is refused. The embedded store must not
be in use by a running job.

Hours: --hour 2026-11-29T10Z, or --from/--to (both included), or
--all-ready (every hour of the lake that is final).

A fleet's job (setup --ranges, run --fleet) has its checkpoints per range:
its watermark is the lowest any range committed in the lease table
(--lease-table, --job-name as given to run), and an hour is final once
every range has passed it.`

const reconcileSummary = `Reconciles hours without writing: recounts them from the raw-click lake
and prints, per (ad, hour), fast, late, A, B, final and whether
final = fast + late - A + B holds. Exits 1 if any (ad, hour) does not balance.
The horizon and allowance are the job's, as for recount.`

type recountFlags struct {
	hour, from, to   string
	allReady, force  bool
	forceSettings    bool
	gen              int64
	data, lake       string
	checkpoints      string
	watermark        string
	jsonOut          bool
	horizonMs        int64
	allowanceMs      int64
	marginMs         int64
	maxIDs           int
	logLevel         string
	logFormat        string
	leaseTable, job  string // a fleet's job (recount_fleet.go)
	acceptUnbalanced string
	sf               sinkFlags
}

func (f *recountFlags) register(fs *flag.FlagSet, write bool) {
	fs.StringVar(&f.hour, "hour", "", "the hour to recount, like 2026-11-29T10Z")
	fs.StringVar(&f.from, "from", "", "first hour of a range (included)")
	fs.StringVar(&f.to, "to", "", "last hour of a range (included)")
	fs.BoolVar(&f.allReady, "all-ready", false, "every hour of the lake that is final")
	fs.BoolVar(&f.force, "force", false, "recount hours that are not final yet")
	fs.BoolVar(&f.forceSettings, "force-settings", false, "use --horizon-ms and --allowance-ms even where they differ from the job's (its latest checkpoint's)")
	if write {
		fs.StringVar(&f.acceptUnbalanced, "accept-unbalanced", "", "WHO: WHY — finalise an hour that does not balance anyway (with --hour only); the acceptance is logged with the hour and the difference. Without it such an hour is held: no final_* is written")
		fs.Int64Var(&f.gen, "gen", 1, "generation written as final_gen (a newer one replaces final_*, an older one is refused)")
	}
	fs.StringVar(&f.data, "data", "./adclick-data", "data directory of the job (checkpoints, embedded store, lake)")
	fs.StringVar(&f.lake, "lake", "", "the raw-click lake: s3://BUCKET/PREFIX (endpoint and credentials from the AWS SDK's variables) or a folder; default DATA/lake")
	fs.StringVar(&f.checkpoints, "checkpoints", "", "the job's checkpoints in s3://BUCKET/PREFIX (as given to run): the watermark, horizon and allowance are the latest one's; default DATA/checkpoints")
	fs.StringVar(&f.watermark, "watermark", "", "the job watermark (RFC 3339 time or Unix ms), instead of the latest checkpoint's")
	fs.StringVar(&f.leaseTable, "lease-table", "", "a fleet's lease table (default with --sink dynamodb:TABLE: TABLE"+lease.TableSuffix+"): for a job run by run --fleet, whose --checkpoints hold one prefix per range, the watermark is the lowest its ranges committed there")
	fs.StringVar(&f.job, "job-name", "", "a fleet's job name in the lease table, as given to setup --ranges and run --fleet (default: the --checkpoints s3:// location)")
	fs.BoolVar(&f.jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.Int64Var(&f.horizonMs, "horizon-ms", preagg.DefaultHorizonMs, "acceptance horizon after the impression, ms: the job's, from its latest checkpoint; this default only without one")
	fs.Int64Var(&f.allowanceMs, "allowance-ms", 5_000, "out-of-orderness allowance, ms: the job's, from its latest checkpoint; this default only without one")
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
	if f.acceptUnbalanced != "" && f.hour == "" {
		return usageError{errors.New("--accept-unbalanced accepts the difference of one hour: give it with --hour")}
	}
	store, err := openLake(ctx, f.lake, f.data)
	if err != nil {
		return err
	}
	ck, where, err := latestCheckpoint(ctx, f.checkpoints, f.data)
	if err != nil {
		return err
	}
	if named := f.leaseTable != "" || f.job != ""; ck == nil || named {
		// A fleet's job keeps no checkpoint at the root, one per range.
		// Named with --lease-table or --job-name, it is the one meant,
		// whatever the root holds.
		fck, fwhere, err := f.fleetCheckpoint(ctx, log)
		if err != nil {
			return err
		}
		if fck != nil || fwhere != "" {
			if ck != nil {
				log.Warn("the --checkpoints root also holds a checkpoint, of a job that is not the fleet's: not used", "checkpoint", ck.where)
			}
			ck, where = fck, fwhere
		}
	}
	if err := f.jobSettings(fs, ck, log); err != nil {
		return err
	}
	wmFn, err := watermarkFunc(f.watermark, ck)
	if err != nil {
		return err
	}
	if wmFn == nil && !f.force {
		return fmt.Errorf("no checkpoint in %s: the job watermark is unknown; pass --watermark, or --force (a fleet's job: --job-name as given to run --fleet)", where)
	}
	rows, closeRows, err := openRows(ctx, &f.sf, f.data)
	if err != nil {
		return err
	}
	defer closeRows()

	o := recount.Options{Store: store, Rows: rows, Gen: f.gen, Watermark: wmFn, Force: f.force,
		Judge:    recount.Judge{HorizonMs: f.horizonMs, AllowanceMs: &f.allowanceMs},
		MarginMs: f.marginMs, MaxLoggedIDs: f.maxIDs, Logger: log, AcceptUnbalanced: f.acceptUnbalanced}
	if o.Hours, err = f.selectHours(ctx, store, wmFn); err != nil {
		return err
	}
	if len(o.Hours) == 0 {
		log.Info("no hour to recount")
		return nil
	}
	bar := newProgress(stderr, -1, fmt.Sprintf("%s %d hours", name, len(o.Hours)), "rows")
	o.Progress = func(p recount.Progress) {
		bar.describe(fmt.Sprintf("%s %s (%d/%d hours)", name, recount.FormatHour(p.HourMs), p.HoursDone, p.HoursTotal))
		bar.set(p.Rows)
		log.Debug("progress", "hour", recount.FormatHour(p.HourMs), "hours_done", p.HoursDone, "hours", p.HoursTotal, "rows", p.Rows)
	}
	var results []recount.HourResult
	if write {
		results, err = recount.Run(ctx, o)
	} else {
		results, err = recount.Reconcile(ctx, o)
	}
	bar.finish()
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
		bucket, prefix, err := s3lake.ParseURL(lake)
		if err != nil {
			return nil, usageError{err}
		}
		cfg, err := loadAWS(ctx)
		if err != nil {
			return nil, err
		}
		return s3lake.New(s3lake.NewClient(cfg), bucket, prefix), nil
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

// jobCheckpoint is the job's latest complete checkpoint.
type jobCheckpoint struct {
	meta  runtime.Meta
	where string // the store's location of it
}

// latestCheckpoint reads the metadata of the job's newest complete
// checkpoint (runtime.LatestMeta): in an s3:// --checkpoints store, else
// in the store under DATA, which is not created if missing. It returns nil
// if there is none, and where it looked.
func latestCheckpoint(ctx context.Context, checkpoints, data string) (*jobCheckpoint, string, error) {
	var st ckpt.Store
	where := checkpoints
	if checkpoints != "" {
		if !strings.HasPrefix(checkpoints, "s3://") {
			return nil, "", usageError{fmt.Errorf("--checkpoints %q: want s3://BUCKET/PREFIX (the default reads DATA/checkpoints)", checkpoints)}
		}
		var err error
		if st, err = openCheckpoints(ctx, checkpoints, nil); err != nil {
			return nil, "", err
		}
	} else {
		where = filepath.Join(data, "checkpoints")
		l, err := ckptstore.OpenLocal(data, ckptstore.Options{})
		if errors.Is(err, fs.ErrNotExist) {
			return nil, where, nil
		}
		if err != nil {
			return nil, "", err
		}
		st = l
	}
	m, ok, err := runtime.LatestMeta(ctx, st)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoints in %s: %w", where, err)
	}
	if !ok {
		return nil, where, nil
	}
	return &jobCheckpoint{meta: m, where: st.Location(m.ID, ckpt.Checkpoint)}, where, nil
}

// jobSettings sets the horizon and the allowance to the job's, from its
// latest checkpoint ck: the recount must judge every click as the stream
// did. A flag given explicitly (command line or environment) that differs
// is refused unless --force-settings; without ck, or for a setting ck does
// not record (an older version's checkpoint), the flag's value is used.
func (f *recountFlags) jobSettings(fs *flag.FlagSet, ck *jobCheckpoint, log *slog.Logger) error {
	if ck == nil {
		log.Warn("no checkpoint: judging with the flags' horizon and allowance, which must be the job's",
			"horizon_ms", f.horizonMs, "allowance_ms", f.allowanceMs)
		return nil
	}
	horizon, hasHorizon := ck.meta.Setting("horizon_ms")
	var allowance int64
	if ck.meta.AllowanceMs != nil {
		allowance = *ck.meta.AllowanceMs
	}
	var errs []error
	for _, s := range []struct {
		flag     string
		v        *int64
		job      int64
		recorded bool
	}{
		{"horizon-ms", &f.horizonMs, horizon, hasHorizon},
		{"allowance-ms", &f.allowanceMs, allowance, ck.meta.AllowanceMs != nil},
	} {
		switch given := explicit(fs, s.flag); {
		case !s.recorded:
			log.Warn("the checkpoint does not record the job's setting: using the flag's, which must be the job's",
				"checkpoint", ck.meta.ID, "flag", "--"+s.flag, "value", *s.v)
		case !given || *s.v == s.job:
			*s.v = s.job
		case f.forceSettings:
			log.Warn("judging with a setting that differs from the job's (--force-settings)",
				"flag", "--"+s.flag, "value", *s.v, "job", s.job, "checkpoint", ck.meta.ID)
		default:
			errs = append(errs, fmt.Errorf("--%s %d differs from the job's %d (checkpoint %d, %s)", s.flag, *s.v, s.job, ck.meta.ID, ck.where))
		}
	}
	if len(errs) > 0 {
		errs = append(errs, errors.New("the recount must judge clicks as the job did: drop the flag (the job's value is the default), or pass --force-settings"))
		return usageError{errors.Join(errs...)}
	}
	log.Info("judging clicks", "horizon_ms", f.horizonMs, "allowance_ms", f.allowanceMs, "job_checkpoint", ck.meta.ID)
	return nil
}

// watermarkFunc returns the job watermark: --watermark, or that of the
// latest checkpoint ck (nil if neither is given).
func watermarkFunc(flagVal string, ck *jobCheckpoint) (func(context.Context) (int64, error), error) {
	var wm int64
	switch {
	case flagVal != "":
		ms, err := parseTimeMs(flagVal)
		if err != nil {
			return nil, usageError{fmt.Errorf("--watermark %q: %w", flagVal, err)}
		}
		wm = ms
	case ck != nil:
		wm = ck.meta.Watermark
	default:
		return nil, nil
	}
	return func(context.Context) (int64, error) { return wm, nil }, nil
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

// selectHours returns the hours the flags name (recount.SelectHours).
func (f *recountFlags) selectHours(ctx context.Context, store recount.Store, wmFn func(context.Context) (int64, error)) ([]int64, error) {
	sel := recount.Selection{AllReady: f.allReady, Force: f.force, HorizonMs: f.horizonMs, MarginMs: f.marginMs}
	switch {
	case f.hour != "":
		h, err := recount.ParseHour(f.hour)
		if err != nil {
			return nil, usageError{err}
		}
		sel.FromMs, sel.ToMs = h, h
	case !f.allReady:
		if f.from == "" || f.to == "" {
			return nil, usageError{errors.New("--from and --to go together")}
		}
		var err error
		if sel.FromMs, err = recount.ParseHour(f.from); err != nil {
			return nil, usageError{err}
		}
		if sel.ToMs, err = recount.ParseHour(f.to); err != nil {
			return nil, usageError{err}
		}
	}
	hs, err := recount.SelectHours(ctx, store, sel, wmFn)
	var re *recount.RangeError
	if errors.As(err, &re) {
		return nil, usageError{err}
	}
	return hs, err
}
