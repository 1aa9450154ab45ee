package main

import (
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
)

const setupSummary = `Creates what the job needs in AWS if it is missing (idempotent): with
--sink dynamodb:TABLE the ad_metrics table (key entity + bucket, on-demand
billing) with its two tag-index global secondary indexes, fast_ix and late_ix,
and next to it the lease table (--lease-table, default TABLE-leases; key
lease_key, on-demand billing), which keeps two processes from running as the
same job; with --stream STREAM a Kinesis stream of --shards shards; with
--checkpoints s3://BUCKET/PREFIX the bucket. Any of them may be given in one
call. Endpoints, region and credentials come from the AWS SDK's variables.`

func cmdSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("setup", setupSummary, stderr)
	var sf sinkFlags
	sf.register(fs, false)
	fs.Lookup("sink").DefValue = ""
	sf.sink = ""
	stream := fs.String("stream", "", "Kinesis stream to create if missing")
	bucket := fs.String("checkpoints", "", "s3://BUCKET/PREFIX: create the bucket if missing")
	shards := fs.Int("shards", 4, "shards of a new stream")
	leaseTable := fs.String("lease-table", "", "lease table to create if missing (default: the --sink table's name + \""+lease.TableSuffix+"\")")
	if err := parse(fs, args); err != nil {
		return err
	}
	table, isDynamo, err := sf.table()
	if err != nil {
		return err
	}
	if *leaseTable == "" && isDynamo {
		*leaseTable = lease.DefaultTable(table)
	}
	if !isDynamo && *stream == "" && *bucket == "" && *leaseTable == "" {
		return usageError{fmt.Errorf("nothing to set up: pass --sink dynamodb:TABLE, --lease-table TABLE, --stream STREAM and/or --checkpoints s3://BUCKET/PREFIX")}
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
	if isDynamo {
		st, err := openDynamo(ctx, table, nil)
		if err != nil {
			return err
		}
		if err := st.CreateTable(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "table %s ready\n", table)
	}
	if *leaseTable != "" {
		cfg, err := loadAWS(ctx)
		if err != nil {
			return err
		}
		if err := lease.CreateTable(ctx, dynamodb.NewFromConfig(cfg), *leaseTable); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "lease table %s ready\n", *leaseTable)
	}
	return nil
}
