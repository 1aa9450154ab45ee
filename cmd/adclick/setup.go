package main

import (
	"context"
	"fmt"
	"io"

	"github.com/adclick/adclick/ingest/kinesis"
)

const setupSummary = `Creates what the job needs in AWS if it is missing (idempotent): with
--sink dynamodb:TABLE the ad_metrics table (key entity + bucket, on-demand
billing) with its two tag-index global secondary indexes, fast_ix and late_ix;
with --stream STREAM a Kinesis stream of --shards shards. Both may be given
in one call. Endpoints, region and credentials come from the AWS SDK's
variables.`

func cmdSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("setup", setupSummary, stderr)
	var sf sinkFlags
	sf.register(fs, false)
	fs.Lookup("sink").DefValue = ""
	sf.sink = ""
	stream := fs.String("stream", "", "Kinesis stream to create if missing")
	bucket := fs.String("checkpoints", "", "s3://BUCKET/PREFIX: create the bucket if missing")
	shards := fs.Int("shards", 4, "shards of a new stream")
	if err := parse(fs, args); err != nil {
		return err
	}
	table, isDynamo, err := sf.table()
	if err != nil {
		return err
	}
	if !isDynamo && *stream == "" && *bucket == "" {
		return usageError{fmt.Errorf("nothing to set up: pass --sink dynamodb:TABLE, --stream STREAM and/or --checkpoints s3://BUCKET/PREFIX")}
	}
	if *bucket != "" {
		if err := ensureBucket(ctx, *bucket); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "bucket for %s ready\n", *bucket)
	}
	if *stream != "" {
		api, err := newKinesisClient(ctx)
		if err != nil {
			return err
		}
		if err := kinesis.EnsureStream(ctx, api, *stream, *shards); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stream %s ready\n", *stream)
	}
	if !isDynamo {
		return nil
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
