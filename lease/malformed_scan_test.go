package lease

import (
	"github.com/adclick/adclick/windowing"

	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// One malformed range item (a counter that is not a number) does not fail
// the scan: the other items are read, so the workers go on balancing
// them; the malformed one is left out, counted in a gauge, and logged
// once, not at every scan (before, every scan failed, and nobody took
// over anything).
func TestScanSkipsAMalformedItem(t *testing.T) {
	runMalformedScan(t, newTable(t), testTable)
}

// runMalformedScan is TestScanSkipsAMalformedItem's scenario on api's
// table.
func runMalformedScan(t *testing.T, api RangeAPI, table string) {
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	w, err := NewWorker(api, WorkerOptions{Table: table, Job: testJob, ID: "a", Duration: D, Clock: newFakeClock(),
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rs := []Range{{From: 0, To: 64}, {From: 64, To: windowing.MaxParallelism}}
	if err := w.Setup(ctx, rs); err != nil {
		t.Fatal(err)
	}
	bad := RangeKey(testJob, rs[0])
	if _, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{attrKey: avS(bad)},
		UpdateExpression:          aws.String("SET #c = :bad"),
		ExpressionAttributeNames:  map[string]string{"#c": attrCounter},
		ExpressionAttributeValues: map[string]types.AttributeValue{":bad": avS("seven")},
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s, err := w.Scan(ctx)
		if err != nil {
			t.Fatalf("scan %d: %v, want the other items", i+1, err)
		}
		var keys []string
		for _, it := range s.Items {
			keys = append(keys, it.Key)
		}
		want := RangeKey(testJob, rs[1])
		if len(keys) != 1 || keys[0] != want {
			t.Errorf("scan %d: got items %v, want [%s]", i+1, keys, want)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "adclick_lease_malformed_items" {
			got = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if got != 1 {
		t.Errorf("adclick_lease_malformed_items = %v (-1: not registered), want 1", got)
	}
	if got := strings.Count(logs.String(), "lease item is malformed"); got != 1 {
		t.Errorf("got %d log lines about the malformed item after 3 scans, want 1:\n%s", got, logs)
	}
	if !strings.Contains(logs.String(), bad) {
		t.Errorf("the log does not name the malformed item %s:\n%s", bad, logs)
	}
}
