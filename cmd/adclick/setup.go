package main

import (
	"context"
	"fmt"
	"io"
)

const setupSummary = `Creates what the job needs in AWS if it is missing (idempotent): with
--sink dynamodb:TABLE the ad_metrics table (key entity + bucket, on-demand
billing) with its two tag-index global secondary indexes, fast_ix and late_ix.
Endpoints, region and credentials come from the AWS SDK's variables.`

func cmdSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("setup", setupSummary, stderr)
	var sf sinkFlags
	sf.register(fs, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	table, isDynamo, err := sf.table()
	if err != nil {
		return err
	}
	if !isDynamo {
		return usageError{fmt.Errorf("nothing to set up: pass --sink dynamodb:TABLE")}
	}
	st, err := openDynamo(ctx, table, nil)
	if err != nil {
		return err
	}
	if err := st.CreateTable(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "table %s ready\n", table)
	return nil
}
