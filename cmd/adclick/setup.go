package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/sink/dynamo"
)

const setupSummary = `Creates what the job needs in AWS if it is missing (idempotent): with
--sink dynamodb:TABLE the ad_metrics table (key entity + bucket, on-demand
billing) with its two tag-index global secondary indexes, fast_ix and late_ix,
and the bucket index by_bucket_shard (bucket_shard + entity, for GET
/v1/hours/{hour}; bucket_shard is "<bucket>#<n>", n < 32 a hash of the ad, so
that a minute's burst of writes spreads over 32 partition keys), added to a
table made before it (DynamoDB then builds it from the rows that carry
bucket_shard; --backfill-bucket-shards sets it on older rows, a Scan of the
table), and TTL on its expires_at attribute (rows expire after run's
--minute-retention-days and --hour-retention-days). Next to it the lease table (--lease-table, default TABLE-leases; key
lease_key, on-demand billing), which keeps two processes from running as the
same job; with --ranges N and --job-name NAME also that job's N key-group
ranges in it (a job that several workers share: adclick run --fleet); with --stream STREAM a Kinesis stream of --shards shards; with
--checkpoints s3://BUCKET/PREFIX the bucket. Any of them may be given in one
call. While it waits for a table, an index or the stream to become ACTIVE it
shows what it waits for on a terminal's stderr. Endpoints, region and
credentials come from the AWS SDK's variables.`

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
	ranges := fs.Int("ranges", 0, "with --job-name: cut the job's 128 key groups into this many ranges of (nearly) equal size in the lease table, for a job that several workers share (adclick run --fleet); 1 to 128; a job set up before must have the same ranges")
	jobName := fs.String("job-name", "", "with --ranges: the job's name in the lease table, as run's --job-name")
	backfill := fs.Bool("backfill-bucket-shards", false, "with --sink dynamodb:TABLE, set "+dynamo.BucketShardAttribute+" on every row that lacks it (rows written by a release before "+dynamo.BucketIndex+", missing from GET /v1/hours/{hour}); scans the whole table")
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
	if (*ranges != 0) != (*jobName != "") {
		return usageError{fmt.Errorf("--ranges and --job-name go together: the ranges belong to a job")}
	}
	var rs []lease.Range
	if *ranges != 0 {
		if rs, err = lease.EvenRanges(*ranges); err != nil {
			return usageError{fmt.Errorf("--ranges %d: %w", *ranges, err)}
		}
		if *leaseTable == "" {
			return usageError{fmt.Errorf("--ranges needs a lease table: --lease-table TABLE, or --sink dynamodb:TABLE")}
		}
	}
	if !isDynamo && *stream == "" && *bucket == "" && *leaseTable == "" {
		return usageError{fmt.Errorf("nothing to set up: pass --sink dynamodb:TABLE, --lease-table TABLE, --stream STREAM and/or --checkpoints s3://BUCKET/PREFIX")}
	}
	spin := newWaitSpinner(stderr)
	defer spin.done()
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
		err = kinesis.EnsureStream(ctx, streamWaits{API: api, stream: *stream, spin: spin}, *stream, *shards)
		spin.done()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stream %s ready\n", *stream)
	}
	if isDynamo {
		st, err := openDynamo(ctx, table, nil)
		if err != nil {
			return err
		}
		added, err := st.CreateTableAdded(ctx, func(pending string) { spin.wait(waitingFor("table", table, pending)) })
		spin.done()
		if err != nil {
			return err
		}
		status, attr, err := st.TTLStatus(ctx)
		if err != nil {
			return err
		}
		switch {
		case (status == types.TimeToLiveStatusEnabled || status == types.TimeToLiveStatusEnabling) && attr == dynamo.TTLAttribute:
			fmt.Fprintf(stdout, "table %s ready (indexes fast_ix, late_ix, %s; TTL on %s %s)\n", table, dynamo.BucketIndex, attr, strings.ToLower(string(status)))
		default:
			fmt.Fprintf(stdout, "table %s ready (indexes fast_ix, late_ix, %s)\n", table, dynamo.BucketIndex)
			fmt.Fprintf(stderr, "adclick setup: TTL of table %s is %s: this endpoint does not support TTL, rows will not expire\n", table, status)
		}
		switch {
		case *backfill:
			spin.wait(fmt.Sprintf("table %s: setting %s on older rows (a Scan of the table)", table, dynamo.BucketShardAttribute))
			n, err := st.BackfillBucketShards(ctx)
			spin.done()
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "table %s: %s set on %d rows\n", table, dynamo.BucketShardAttribute, n)
		case added:
			fmt.Fprintf(stdout, "table %s: index %s added; rows written before it lack %s and are missing from GET /v1/hours/{hour} until written again: run adclick setup --sink dynamodb:%s --backfill-bucket-shards once (a Scan of the table)\n",
				table, dynamo.BucketIndex, dynamo.BucketShardAttribute, table)
		}
	}
	if *leaseTable != "" {
		cfg, err := loadAWS(ctx)
		if err != nil {
			return err
		}
		err = lease.CreateTable(ctx, leaseTableWaits{API: dynamodb.NewFromConfig(cfg), table: *leaseTable, spin: spin}, *leaseTable)
		spin.done()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "lease table %s ready\n", *leaseTable)
		if len(rs) > 0 {
			w, err := lease.NewWorker(dynamodb.NewFromConfig(cfg), lease.WorkerOptions{Table: *leaseTable, Job: *jobName})
			if err != nil {
				return err
			}
			if err := w.Setup(ctx, rs); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "job %s: %d key-group ranges ready in %s\n", *jobName, len(rs), *leaseTable)
		}
	}
	return nil
}

// waitingFor is the spinner's text while setup waits for a resource:
// "waiting for table ad_metrics (index by_bucket_shard: CREATING)".
func waitingFor(kind, name, pending string) string {
	return fmt.Sprintf("waiting for %s %s (%s)", kind, name, pending)
}

// streamWaits is a Kinesis client that shows the stream's status on spin
// while EnsureStream polls it.
type streamWaits struct {
	kinesis.API
	stream string
	spin   *waitSpinner
}

func (s streamWaits) DescribeStreamSummary(ctx context.Context, in *awskinesis.DescribeStreamSummaryInput, optFns ...func(*awskinesis.Options)) (*awskinesis.DescribeStreamSummaryOutput, error) {
	out, err := s.API.DescribeStreamSummary(ctx, in, optFns...)
	if err == nil && out.StreamDescriptionSummary != nil {
		if st := out.StreamDescriptionSummary.StreamStatus; st != kinesistypes.StreamStatusActive {
			s.spin.wait(waitingFor("stream", s.stream, string(st)))
		}
	}
	return out, err
}

// leaseTableWaits is a DynamoDB client that shows the lease table's status
// on spin while lease.CreateTable polls it.
type leaseTableWaits struct {
	lease.API
	table string
	spin  *waitSpinner
}

func (l leaseTableWaits) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	out, err := l.API.DescribeTable(ctx, in, optFns...)
	if err == nil && out.Table != nil && out.Table.TableStatus != types.TableStatusActive {
		l.spin.wait(waitingFor("lease table", l.table, string(out.Table.TableStatus)))
	}
	return out, err
}
