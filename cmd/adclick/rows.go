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

const rowsSummary = `Prints the ad_metrics rows of the embedded store under --data as JSON Lines,
sorted by (entity, bucket), with every attribute each row carries. The job
must not be running on the same --data.`

func cmdRows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rows", rowsSummary, stderr)
	dir := fs.String("data", "./adclick-data", "data directory of the job")
	if err := parse(fs, args); err != nil {
		return err
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
	w := bufio.NewWriter(stdout)
	var buf []byte
	err = st.ScanOrdered(ctx, func(it sink.Item) error {
		buf = append(it.AppendJSON(buf[:0]), '\n')
		_, err := w.Write(buf)
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
