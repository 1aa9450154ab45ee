package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/dynamo"
	"github.com/adclick/adclick/sink/valkey"
)

// sinkFlags selects the row and running-total stores.
type sinkFlags struct {
	sink         string
	valkey       string
	valkeyPrefix string
	valkeyTLS    bool
	valkeyCA     string
	retention    sink.Retention // of the DynamoDB rows open makes (run's flags)
}

// retentionFlags registers run's row retention flags; the function it
// returns gives the retention once the flags are parsed.
func retentionFlags(fs *flag.FlagSet) func() sink.Retention {
	minute := fs.Int("minute-retention-days", int(sink.DefaultMinuteRetention/(24*time.Hour)),
		fmt.Sprintf("days a minute row is kept after its minute: every write sets its expires_at, which DynamoDB's TTL (and the embedded store) deletes it by; 0 = forever, else at least %d", int(sink.MinMinuteRetention/(24*time.Hour))))
	hour := fs.Int("hour-retention-days", int(sink.DefaultHourRetention/(24*time.Hour)),
		fmt.Sprintf("days an hour row (billing) is kept after its hour, the same way; 0 = forever, else at least %d", int(sink.MinHourRetention/(24*time.Hour))))
	return func() sink.Retention { return sink.RetentionDays(*minute, *hour) }
}

func (f *sinkFlags) register(fs *flag.FlagSet, withValkey bool) {
	fs.StringVar(&f.sink, "sink", "embedded", "row store: embedded (Pebble under --data) or dynamodb:TABLE (endpoint, region and credentials from the AWS SDK's variables, e.g. AWS_REGION, AWS_ENDPOINT_URL_DYNAMODB)")
	if withValkey {
		fs.StringVar(&f.valkey, "valkey", "", "running totals in Valkey at HOST:PORT (default: the embedded store when --sink is embedded, none otherwise)")
		fs.StringVar(&f.valkeyPrefix, "valkey-prefix", "adclick", "prefix of every Valkey key (jobs sharing one Valkey need different prefixes)")
		fs.BoolVar(&f.valkeyTLS, "valkey-tls", false, "connect to Valkey over TLS (1.2 or later), checking its certificate against the system's roots (ElastiCache with in-transit encryption) or --valkey-tls-ca")
		fs.StringVar(&f.valkeyCA, "valkey-tls-ca", "", "PEM file of the certificate authorities that sign Valkey's certificate (implies --valkey-tls)")
	}
}

func (f *sinkFlags) table() (string, bool, error) {
	switch {
	case f.sink == "" || f.sink == "embedded":
		return "", false, nil
	case strings.HasPrefix(f.sink, "dynamodb:") && len(f.sink) > len("dynamodb:"):
		return strings.TrimPrefix(f.sink, "dynamodb:"), true, nil
	}
	return "", false, usageError{fmt.Errorf("--sink %q: want embedded or dynamodb:TABLE", f.sink)}
}

func loadAWS(ctx context.Context) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("no AWS region: set AWS_REGION")
	}
	return cfg, nil
}

// openDynamo opens the rows in a DynamoDB table, writing with the default
// retention.
func openDynamo(ctx context.Context, table string, reg prometheus.Registerer) (*dynamo.Store, error) {
	return openDynamoRetention(ctx, table, reg, sink.Retention{})
}

func openDynamoRetention(ctx context.Context, table string, reg prometheus.Registerer, r sink.Retention) (*dynamo.Store, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	o := dynamo.Options{Table: table, Registerer: reg, Retention: r}
	return dynamo.New(dynamo.NewClient(cfg, o), o)
}

// open returns the stores (nil = embedded) and a function that closes them.
func (f *sinkFlags) open(ctx context.Context, reg prometheus.Registerer) (sink.Rows, sink.Totals, func(), error) {
	var rows sink.Rows
	var totals sink.Totals
	closers := []func(){}
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	table, isDynamo, err := f.table()
	if err != nil {
		return nil, nil, nil, err
	}
	if isDynamo {
		st, err := openDynamoRetention(ctx, table, reg, f.retention)
		if err != nil {
			return nil, nil, nil, err
		}
		rows = st
	}
	if f.valkey != "" {
		opts := valkey.Options{Addr: f.valkey, Prefix: f.valkeyPrefix, Registerer: reg}
		if f.valkeyTLS || f.valkeyCA != "" {
			tc, err := valkey.TLSConfig(f.valkey, f.valkeyCA)
			if err != nil {
				closeAll()
				return nil, nil, nil, err
			}
			opts.TLS = tc
		}
		vs, err := valkey.New(ctx, opts)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("valkey %s: %w", f.valkey, err)
		}
		totals = vs
		closers = append(closers, vs.Close)
	}
	return rows, totals, closeAll, nil
}

// dumpSorted reads every item of rows and prints them sorted by (entity,
// bucket).
func dumpSorted(ctx context.Context, rows sink.Rows, emit func(sink.Item) error) error {
	var items []sink.Item
	if err := rows.Scan(ctx, func(it sink.Item) error { items = append(items, it); return nil }); err != nil {
		return err
	}
	slices.SortFunc(items, func(a, b sink.Item) int {
		return cmp.Or(cmp.Compare(a.Entity, b.Entity), cmp.Compare(a.Bucket, b.Bucket))
	})
	for _, it := range items {
		if err := emit(it); err != nil {
			return err
		}
	}
	return nil
}

func openCheckpoints(ctx context.Context, url string, reg prometheus.Registerer) (ckpt.Store, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	st, err := ckptstore.OpenURL(cfg, url, ckptstore.Options{Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("--checkpoints %s: %w", url, err)
	}
	return st, nil
}

// ensureBucket creates the bucket of an s3:// URL if it does not exist.
func ensureBucket(ctx context.Context, url string) error {
	bucket, _, err := ckptstore.ParseURL(url)
	if err != nil {
		return usageError{err}
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return err
	}
	c := ckptstore.NewS3Client(cfg)
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err == nil {
		return nil
	}
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var owned *s3types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return nil
}
