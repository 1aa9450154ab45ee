//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamotypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
)

// ptyScreen collects what is drawn on a pseudo-terminal.
type ptyScreen struct {
	mu  sync.Mutex
	b   strings.Builder
	tty *os.File
}

func newPTYScreen(t *testing.T) *ptyScreen {
	t.Helper()
	master, tty := openPTY(t)
	s := &ptyScreen{tty: tty}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			s.mu.Lock()
			s.b.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

// waitFor waits until the terminal has shown want.
func (s *ptyScreen) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		got := s.b.String()
		s.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Errorf("the terminal shows %q, want %q", s.b.String(), want)
}

// creatingStream is a Kinesis API whose stream does not exist, then is
// CREATING for a few polls.
type creatingStream struct {
	kinesis.API
	mu    sync.Mutex
	polls int
}

func (c *creatingStream) CreateStream(context.Context, *awskinesis.CreateStreamInput, ...func(*awskinesis.Options)) (*awskinesis.CreateStreamOutput, error) {
	return &awskinesis.CreateStreamOutput{}, nil
}

func (c *creatingStream) DescribeStreamSummary(context.Context, *awskinesis.DescribeStreamSummaryInput, ...func(*awskinesis.Options)) (*awskinesis.DescribeStreamSummaryOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.polls++
	status := kinesistypes.StreamStatusCreating
	switch {
	case c.polls == 1:
		return nil, &kinesistypes.ResourceNotFoundException{Message: aws.String("no stream")}
	case c.polls > 5:
		status = kinesistypes.StreamStatusActive
	}
	return &awskinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &kinesistypes.StreamDescriptionSummary{StreamStatus: status}}, nil
}

// creatingTable is a DynamoDB API whose lease table is CREATING for a few
// polls.
type creatingTable struct {
	lease.API
	polls int
}

func (c *creatingTable) CreateTable(_ context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return &dynamodb.CreateTableOutput{}, nil
}

func (c *creatingTable) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	c.polls++
	status := dynamotypes.TableStatusCreating
	if c.polls > 4 {
		status = dynamotypes.TableStatusActive
	}
	in := lease.TableInput("x")
	return &dynamodb.DescribeTableOutput{Table: &dynamotypes.TableDescription{TableStatus: status, KeySchema: in.KeySchema, AttributeDefinitions: in.AttributeDefinitions}}, nil
}

// TestSetupSpinnerShowsWhatItWaitsFor: while setup polls a stream or a
// table that is not ACTIVE, a terminal's stderr shows what it waits for.
func TestSetupSpinnerShowsWhatItWaitsFor(t *testing.T) {
	scr := newPTYScreen(t)
	spin := newWaitSpinner(scr.tty)
	if spin == nil {
		t.Fatal("newWaitSpinner on a terminal: nil")
	}
	if err := kinesis.EnsureStream(t.Context(), streamWaits{API: &creatingStream{}, stream: "clicks", spin: spin}, "clicks", 2); err != nil {
		t.Fatal(err)
	}
	spin.done()
	scr.waitFor(t, "waiting for stream clicks (CREATING)")

	if err := lease.CreateTable(t.Context(), leaseTableWaits{API: &creatingTable{}, table: "ad_metrics-leases", spin: spin}, "ad_metrics-leases"); err != nil {
		t.Fatal(err)
	}
	spin.done()
	scr.waitFor(t, "waiting for lease table ad_metrics-leases (CREATING)")

	// What CreateTableAdded's callback shows.
	spin.wait(waitingFor("table", "ad_metrics", "index by_bucket_shard: CREATING"))
	scr.waitFor(t, "waiting for table ad_metrics (index by_bucket_shard: CREATING)")
	spin.done()
}

// TestSetupSpinnerQuietOffATerminal: off a terminal the wrappers poll the
// same and nothing is drawn.
func TestSetupSpinnerQuietOffATerminal(t *testing.T) {
	var b bytes.Buffer
	spin := newWaitSpinner(&b)
	if spin != nil {
		t.Fatal("newWaitSpinner on a buffer: got a spinner, want nil")
	}
	if err := kinesis.EnsureStream(t.Context(), streamWaits{API: &creatingStream{}, stream: "clicks", spin: spin}, "clicks", 2); err != nil {
		t.Fatal(err)
	}
	spin.wait("x")
	spin.done()
	if b.Len() != 0 {
		t.Errorf("wrote %q off a terminal", b.String())
	}
	if flushProgress(&b) != nil {
		t.Error("flushProgress on a buffer: got a callback, want nil (the flush only logs)")
	}
}

// TestFlushProgressBar: run's flush callback draws the flush's counts on a
// terminal.
func TestFlushProgressBar(t *testing.T) {
	scr := newPTYScreen(t)
	fn := flushProgress(scr.tty)
	if fn == nil {
		t.Fatal("flushProgress on a terminal: nil")
	}
	fn(flush.Progress{Phase: flush.PhaseRows, QueriesTotal: 48})
	fn(flush.Progress{Phase: flush.PhaseRows, Queries: 48, QueriesTotal: 48, Examined: 120, Removed: 80, Rewritten: 20})
	time.Sleep(150 * time.Millisecond) // past the bar's throttle
	fn(flush.Progress{Phase: flush.PhaseTotals, Queries: 48, QueriesTotal: 48, Examined: 120, Removed: 81, Rewritten: 23})
	scr.waitFor(t, "flush after restore (running totals): 120 items examined, 81 removed, 23 rewritten")
	fn(flush.Progress{Phase: flush.PhaseDone, Queries: 48, QueriesTotal: 48, Examined: 120, Removed: 81, Rewritten: 23})
}

// TestSpinnerDrawnAtOnce: a spinner (no count, nothing added) is drawn as
// soon as it is made, and kept redrawn: sweep's and setup's show nothing
// else.
func TestSpinnerDrawnAtOnce(t *testing.T) {
	scr := newPTYScreen(t)
	p := newProgress(scr.tty, -1, "sweep: waiting for the job", "")
	scr.waitFor(t, "sweep: waiting for the job")
	p.finish()
}
