package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
)

func newKinesisClient(ctx context.Context) (*awskinesis.Client, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	return awskinesis.NewFromConfig(cfg), nil
}

// parseStartAt parses --start-at: trim_horizon, latest or an RFC 3339 time.
func parseStartAt(v string, o *kinesis.Options) error {
	switch strings.ToLower(v) {
	case "", "trim_horizon":
		o.StartAt = kinesis.StartTrimHorizon
	case "latest":
		o.StartAt = kinesis.StartLatest
	default:
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return usageError{fmt.Errorf("--start-at %q: want trim_horizon, latest or an RFC 3339 time", v)}
		}
		o.StartAt, o.StartTimestamp = kinesis.StartAtTimestamp, t
	}
	return nil
}

func streamName(to string) (string, error) {
	s, ok := strings.CutPrefix(to, "kinesis:")
	if !ok || s == "" {
		return "", usageError{fmt.Errorf("--to %q: want kinesis:STREAM", to)}
	}
	return s, nil
}

const putSummary = `Puts a click file (the file-source format) into a Kinesis stream with
PutRecords: the file's n-th distinct "shard" value goes to the stream's n-th
open shard (by ExplicitHashKey), in file order, in batches of up to 500
records, retrying only the failed entries. With --aggregate the records are
KPL-aggregated first.`

func cmdPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", putSummary, stderr)
	from := fs.String("from", "", "click file (JSON Lines, file-source format)")
	to := fs.String("to", "", "kinesis:STREAM")
	aggregate := fs.Bool("aggregate", false, "KPL-aggregate the records")
	if err := parse(fs, args); err != nil {
		return err
	}
	stream, err := streamName(*to)
	if err != nil {
		return err
	}
	if *from == "" {
		return usageError{errors.New("--from FILE is required")}
	}
	f, err := os.Open(*from)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := putLines(ctx, stream, *aggregate, func(fn func([]byte) error) error {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), ingest.MaxLine)
		for sc.Scan() {
			if err := fn(sc.Bytes()); err != nil {
				return err
			}
		}
		return sc.Err()
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "put %d records into %s\n", n, stream)
	return nil
}

// putLines puts every line of each into the stream, mapping the lines' shard
// values to the stream's shards in order of first appearance.
func putLines(ctx context.Context, stream string, aggregate bool, each func(func([]byte) error) error) (int, error) {
	api, err := newKinesisClient(ctx)
	if err != nil {
		return 0, err
	}
	keys, err := kinesis.ShardHashKeys(ctx, api, stream)
	if err != nil {
		return 0, err
	}
	shardOf := map[string]int{}
	var batch []kinesis.PutRecord
	total := 0
	flush := func() error {
		recs := batch
		if aggregate {
			var err error
			if recs, err = kinesis.Aggregate(batch, 0); err != nil {
				return err
			}
		}
		if err := kinesis.Put(ctx, api, stream, recs); err != nil {
			return err
		}
		total += len(batch)
		batch = batch[:0]
		return nil
	}
	var c ingest.Click
	err = each(func(line []byte) error {
		ingest.Decode(line, &c)
		n, ok := shardOf[c.Shard]
		if !ok {
			n = len(shardOf)
			shardOf[c.Shard] = n
		}
		pk := c.AdID
		if pk == "" {
			pk = "invalid"
		}
		batch = append(batch, kinesis.PutRecord{Data: append([]byte(nil), line...), PartitionKey: pk, ExplicitHashKey: keys[n%len(keys)]})
		if len(batch) >= 5000 {
			return flush()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	return total, err
}
