package fleet

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
)

// takenAtCommit is the lease table in which, while takeOver is set, the
// range is taken over by worker b just before a checkpoint commit (an
// UpdateItem setting the checkpoint) arrives, which is then refused: the
// holder loses its lease in the middle of its final checkpoint.
type takenAtCommit struct {
	*leasetest.Mem
	takeOver atomic.Bool
}

func (l *takenAtCommit) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET #cp = :cp") && l.takeOver.CompareAndSwap(true, false) {
		if _, err := l.Mem.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: in.TableName, Key: in.Key,
			UpdateExpression:          aws.String("SET #o = :b, #fe = :f, #c = :f"),
			ExpressionAttributeNames:  map[string]string{"#o": "owner", "#fe": "fence", "#c": "counter"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "b~1"}, ":f": &types.AttributeValueMemberN{Value: "1000"}},
		}); err != nil {
			return nil, err
		}
	}
	return l.Mem.UpdateItem(ctx, in, opt...)
}

// A range that failed during a handoff (its lease was lost in the middle
// of its final checkpoint) is booked then; the worker's later stop, at which every range
// it runs stops cleanly, is clean (before, the old handoff failure was
// booked again as a range that "did not stop cleanly", and Run returned an
// error: a clean ECS stop showed as a failed task).
func TestHandoffFailureDoesNotMakeALaterStopUnclean(t *testing.T) {
	w := newWorld(t, 1, 1, kinesis.ReadPoll)
	leases := &takenAtCommit{Mem: w.leases}
	w.leaseAPI = leases
	f := w.fleet("a")
	ctx := context.Background()
	c := takeTheRange(t, f.w)
	f.start(ctx, c)
	waitFor(t, "the range to run", 20*time.Second, func() bool { return len(f.Status()) == 1 })
	leases.takeOver.Store(true)
	f.round(ctx, lease.Plan{HandOff: []lease.Item{{Key: c.Key(), HandoffTo: "b"}}})
	var p *pipeline
	select {
	case p = <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handed-over range did not stop")
	}
	f.finish(p) // as Run books a range that ended before the stop
	if p.err == nil {
		t.Fatal("the handoff stopped cleanly: the test did not reach a failed handoff")
	}
	t.Logf("the handoff failed: %v", p.err)
	if err := f.stopAll(); err != nil {
		t.Errorf("the worker's stop, with no range running: %v, want nil", err)
	}
}

// takeTheRange takes the one range of a job set up with one, as lw.
func takeTheRange(t *testing.T, lw *lease.Worker) *lease.Claim {
	t.Helper()
	ctx := context.Background()
	scan, err := lw.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var it lease.Item
	for _, x := range scan.Items {
		if x.Kind == lease.KindRange {
			it = x
		}
	}
	c, err := lw.Take(ctx, it)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
