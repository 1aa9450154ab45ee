package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

const rowsSummary = `Prints the ad_metrics rows as JSON Lines, sorted by (entity, bucket), with
every attribute each row carries: from the embedded store under --data (the
job must not be running on it), or from DynamoDB with --sink dynamodb:TABLE.
Every line is a JSON object; strings are escaped as encoding/json does (a
byte that is not UTF-8 becomes U+FFFD), so any JSON reader can load them.`

func cmdRows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rows", rowsSummary, stderr)
	dir := fs.String("data", "./adclick-data", "data directory of the job")
	var sf sinkFlags
	sf.register(fs, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	var buf []byte
	emit := func(it sink.Item) error {
		buf = append(it.AppendJSON(buf[:0]), '\n')
		_, err := w.Write(buf)
		return err
	}
	table, isDynamo, err := sf.table()
	if err != nil {
		return err
	}
	if isDynamo {
		st, err := openDynamo(ctx, table, nil)
		if err != nil {
			return err
		}
		if err := dumpSorted(ctx, st, emit); err != nil {
			return err
		}
		return w.Flush()
	}
	p := filepath.Join(*dir, "store")
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("no embedded store in %s: %w", *dir, err)
	}
	st, err := embedded.Open(p, embedded.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.ScanOrdered(ctx, emit); err != nil {
		return err
	}
	return w.Flush()
}
