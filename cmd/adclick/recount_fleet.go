package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/windowing"
)

// fleetMark is the watermark of a fleet's job (adclick setup --ranges) as
// its lease table records it: every range commits its checkpoints, with
// their watermarks, in its lease item, and the job has passed only what
// every range has passed.
type fleetMark struct {
	ranges []lease.Range
	// missing lists the ranges with no committed checkpoint yet: while
	// there is one, the job's watermark is unknown.
	missing []lease.Range
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
	fm := &fleetMark{ranges: m.Ranges}
	found := false
	for _, r := range m.Ranges {
		it, _, err := w.Read(ctx, lease.RangeKey(w.Job(), r))
		if err != nil {
			return nil, err
		}
		if !it.Exists || it.Checkpoint.ID == 0 {
			fm.missing = append(fm.missing, r)
			continue
		}
		if !found || it.Checkpoint.Watermark < fm.watermark {
			fm.watermark, fm.behind, found = it.Checkpoint.Watermark, r, true
		}
	}
	return fm, nil
}

// fleetCheckpoint is latestCheckpoint for a fleet's job, whose checkpoints
// are per range under <--checkpoints>/kg<from>-<to>/: the checkpoint of
// the range furthest behind, with the lowest watermark any range has
// committed. The job is --job-name (default: the --checkpoints location, as
// for run) in --lease-table (default: the --sink dynamodb table's). It
// returns nil and no error for a job that is not a fleet's (no lease table,
// no ranges map), and nil with where saying why if a range has committed
// no checkpoint yet.
func (f *recountFlags) fleetCheckpoint(ctx context.Context, log *slog.Logger) (ck *jobCheckpoint, where string, err error) {
	if !strings.HasPrefix(f.checkpoints, "s3://") {
		if f.leaseTable != "" || f.job != "" {
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
			return nil, "", nil
		}
		leaseTable = lease.DefaultTable(table)
	}
	if job == "" {
		bucket, prefix, err := ckptstore.ParseURL(f.checkpoints)
		if err != nil {
			return nil, "", usageError{err}
		}
		job = bucket + "/" + strings.Trim(prefix, "/")
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
	case errors.As(err, &nf) && f.leaseTable == "":
		return nil, "", nil // no lease table: not a fleet
	case err != nil:
		return nil, "", fmt.Errorf("the fleet's lease table %s: %w", leaseTable, err)
	case fm == nil:
		if f.job != "" {
			return nil, "", fmt.Errorf("the lease table %s has no ranges for the job %q (adclick setup --ranges N --job-name NAME makes them)", leaseTable, job)
		}
		return nil, "", nil
	}
	where = fmt.Sprintf("the %d ranges of the job %q (lease table %s)", len(fm.ranges), job, leaseTable)
	if len(fm.missing) > 0 {
		names := make([]string, len(fm.missing))
		for i, r := range fm.missing {
			names[i] = kgRange(r).String()
		}
		return nil, where + ": " + strings.Join(names, ", ") + " committed no checkpoint yet", nil
	}
	behind := kgRange(fm.behind).String()
	ck, _, err = latestCheckpoint(ctx, strings.TrimSuffix(f.checkpoints, "/")+"/"+behind, f.data)
	if err != nil {
		return nil, "", err
	}
	if ck == nil {
		return nil, "", fmt.Errorf("range %s of the job %q committed checkpoint in its lease item, but %s/%s holds none", behind, job, f.checkpoints, behind)
	}
	ck.meta.Watermark = fm.watermark
	log.Info("a fleet's job: its watermark is that of its range furthest behind", "job", job, "ranges", len(fm.ranges),
		"range", behind, "watermark_ms", fm.watermark)
	return ck, where, nil
}

func kgRange(r lease.Range) windowing.KeyGroups { return windowing.KeyGroups{From: r.From, To: r.To} }
