package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/fleet"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/runtime"
)

// fleetMark is the watermark of a fleet's job (adclick setup --ranges) as
// its lease table records it: every range commits its checkpoints, with
// their watermarks, in its lease item, and the job has passed only what
// every range has passed.
type fleetMark struct {
	ranges []lease.Range
	// committed is each range's committed checkpoint, by range; a range
	// with none yet is in notReady instead.
	committed map[lease.Range]lease.Checkpoint
	// notReady names the ranges that keep every hour from being final:
	// no committed checkpoint yet, or a fence sweep still owed (§12 of the
	// scale-out note). While there is one, the job's watermark is unknown.
	notReady []string
	// watermark is the lowest committed watermark, that of range behind.
	watermark int64
	behind    lease.Range
}

// readFleetMark reads the job's ranges map and each range's item; it
// returns nil for a job that has no ranges map (not a fleet).
func readFleetMark(ctx context.Context, w *lease.Worker) (*fleetMark, error) {
	m, err := w.ReadMap(ctx)
	if err != nil || m == nil {
		return nil, err
	}
	if err := lease.CheckCover(m.Ranges); err != nil {
		return nil, fmt.Errorf("the job's ranges map: %w", err)
	}
	fm := &fleetMark{ranges: m.Ranges, committed: map[lease.Range]lease.Checkpoint{}}
	found := false
	for _, r := range m.Ranges {
		it, _, err := w.Read(ctx, lease.RangeKey(w.Job(), r))
		if err != nil {
			return nil, err
		}
		name := r.String()
		switch {
		case !it.Exists || it.Checkpoint.ID == 0:
			fm.notReady = append(fm.notReady, name+" (no committed checkpoint yet)")
			continue
		case len(it.SweepsDue) > 0:
			fm.notReady = append(fm.notReady, name+" (owes a fence sweep)")
			continue
		}
		fm.committed[r] = it.Checkpoint
		if !found || it.Checkpoint.Watermark < fm.watermark {
			fm.watermark, fm.behind, found = it.Checkpoint.Watermark, r, true
		}
	}
	return fm, nil
}

// fleetCheckpoint is latestCheckpoint for a fleet's job, whose checkpoints
// are per range under <--checkpoints>/kg<from>-<to>/: the checkpoint each
// range committed in its lease item, the job's watermark the lowest of
// theirs, the settings theirs (they must agree). The job is --job-name
// (default: the --checkpoints location, as for run) in --lease-table
// (default: the --sink dynamodb table's). Without either flag, a job with
// no lease table or ranges map is not a fleet's: nil and no error. It
// returns nil with where saying why if a range keeps the watermark
// unknown.
func (f *recountFlags) fleetCheckpoint(ctx context.Context, log *slog.Logger) (ck *jobCheckpoint, where string, err error) {
	named := f.leaseTable != "" || f.job != ""
	if !strings.HasPrefix(f.checkpoints, "s3://") {
		if named {
			return nil, "", usageError{errors.New("--lease-table and --job-name name a fleet's job, whose checkpoints are in --checkpoints s3://BUCKET/PREFIX")}
		}
		return nil, "", nil
	}
	table, isDynamo, err := f.sf.table()
	if err != nil {
		return nil, "", usageError{err}
	}
	leaseTable, job := f.leaseTable, f.job
	if leaseTable == "" {
		if !isDynamo {
			if named {
				return nil, "", usageError{errors.New("--job-name needs the fleet's lease table: --lease-table TABLE, or --sink dynamodb:TABLE")}
			}
			return nil, "", nil
		}
		leaseTable = lease.DefaultTable(table)
	}
	base := strings.TrimSuffix(f.checkpoints, "/")
	if job == "" {
		if job, err = defaultJobName(base); err != nil {
			return nil, "", err
		}
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, "", err
	}
	w, err := lease.NewWorker(dynamodb.NewFromConfig(cfg), lease.WorkerOptions{Table: leaseTable, Job: job})
	if err != nil {
		return nil, "", err
	}
	fm, err := readFleetMark(ctx, w)
	var nf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf) && !named:
		return nil, "", nil // no lease table: not a fleet
	case err != nil:
		return nil, "", fmt.Errorf("the fleet's lease table %s: %w", leaseTable, err)
	case fm == nil && named:
		return nil, "", fmt.Errorf("the lease table %s has no ranges for the job %q (adclick setup --ranges N --job-name NAME makes them; run --fleet takes the same --job-name)", leaseTable, job)
	case fm == nil:
		return nil, "", nil
	}
	where = fmt.Sprintf("the %d ranges of the job %q (lease table %s)", len(fm.ranges), job, leaseTable)
	if len(fm.notReady) > 0 {
		return nil, where + ": " + strings.Join(fm.notReady, ", "), nil
	}
	// Every range's committed checkpoint must judge clicks alike: a fleet
	// half-way through a deploy that changed the horizon or the allowance
	// has no one setting to recount with.
	for _, r := range fm.ranges {
		prefix := fleet.Layout{Checkpoints: base}.CheckpointsOf(r)
		st, err := openCheckpoints(ctx, prefix, nil)
		if err != nil {
			return nil, "", err
		}
		id := fm.committed[r].ID
		m, err := runtime.MetaOf(ctx, st, id)
		if err != nil {
			return nil, "", fmt.Errorf("range %s: its committed checkpoint %d in %s: %w", r, id, prefix, err)
		}
		c := &jobCheckpoint{meta: m, where: st.Location(id, ckpt.Checkpoint)}
		if ck != nil && !sameJudging(ck.meta, m) {
			return nil, "", fmt.Errorf("ranges judge clicks differently: %s (horizon %s, allowance %s) and %s (horizon %s, allowance %s): finish the deploy, or pass --watermark with --force-settings",
				ck.where, settingOf(ck.meta, "horizon"), settingOf(ck.meta, "allowance"), c.where, settingOf(m, "horizon"), settingOf(m, "allowance"))
		}
		if ck == nil || r == fm.behind {
			ck = c
		}
	}
	ck.meta.Watermark = fm.watermark
	log.Info("a fleet's job: its watermark is that of its range furthest behind", "job", job, "ranges", len(fm.ranges),
		"range", fm.behind.String(), "checkpoint", ck.meta.ID, "watermark_ms", fm.watermark)
	return ck, where, nil
}

// sameJudging reports whether two checkpoints record the same horizon and
// allowance.
func sameJudging(a, b runtime.Meta) bool {
	return settingOf(a, "horizon") == settingOf(b, "horizon") && settingOf(a, "allowance") == settingOf(b, "allowance")
}

// settingOf returns a checkpoint's horizon or allowance in ms, or "not
// recorded".
func settingOf(m runtime.Meta, which string) string {
	if which == "allowance" {
		if m.AllowanceMs == nil {
			return "not recorded"
		}
		return strconv.FormatInt(*m.AllowanceMs, 10) + " ms"
	}
	if v, ok := m.Setting("horizon_ms"); ok {
		return strconv.FormatInt(v, 10) + " ms"
	}
	return "not recorded"
}
