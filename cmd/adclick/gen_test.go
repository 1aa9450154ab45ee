package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// genLines runs adclick gen with args and decodes its lines' times.
func genLines(t *testing.T, args ...string) (arrivals, impressions []int64, out string) {
	t.Helper()
	var o, errb bytes.Buffer
	if code := realMain(append([]string{"gen"}, args...), &o, &errb); code != 0 {
		t.Fatalf("gen %v: exit %d\n%s", args, code, errb.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(o.String()), "\n") {
		var c struct {
			ArrivalMs    int64 `json:"arrival_ms"`
			ImpressionMs int64 `json:"impression_ms"`
		}
		if json.Unmarshal([]byte(l), &c) != nil || c.ImpressionMs <= 0 {
			continue // an invalid line
		}
		arrivals = append(arrivals, c.ArrivalMs)
		impressions = append(impressions, c.ImpressionMs)
	}
	return arrivals, impressions, o.String()
}

// TestGenEndsNow: by default the trace ends at the current time (the
// first click arrives clicks/rate seconds before), so a trace put into a
// stream right away is neither in the future nor beyond the horizon, but
// for its heavy tail. (It used to start at 2026-11-29T10:00Z whatever the
// date, and a trace put days later was all beyond the horizon.)
func TestGenEndsNow(t *testing.T) {
	before := time.Now().UnixMilli()
	arr, imp, _ := genLines(t, "--clicks", "2000", "--rate", "100") // 20 s of arrival time
	after := time.Now().UnixMilli()
	if len(arr) < 1900 {
		t.Fatalf("got %d valid lines, want about 2000", len(arr))
	}
	first, last := arr[0], arr[len(arr)-1]
	if want := before - 20_000; first < want-3_000 || first > after-20_000+3_000 {
		t.Errorf("first arrival %s, want about %s (20 s before now)", time.UnixMilli(first).UTC(), time.UnixMilli(want).UTC())
	}
	if last < before-3_000 || last > after+3_000 {
		t.Errorf("last arrival %s, want about now (%s)", time.UnixMilli(last).UTC(), time.UnixMilli(after).UTC())
	}
	old := 0
	for _, im := range imp {
		if after-im > 7_200_000 {
			old++
		}
	}
	if old > len(imp)/20 {
		t.Errorf("%d of %d clicks have an impression more than 2 h before now, want only some of the 2%% heavy tail", old, len(imp))
	}

	// An explicit --start-ms gives the same file every time.
	a1, _, out1 := genLines(t, "--clicks", "500", "--start-ms", "1795946400000")
	time.Sleep(5 * time.Millisecond)
	_, _, out2 := genLines(t, "--clicks", "500", "--start-ms", "1795946400000")
	if out1 != out2 {
		t.Error("two runs with --start-ms 1795946400000 differ")
	}
	if a1[0] < 1_795_946_400_000 || a1[0] > 1_795_946_401_000 {
		t.Errorf("first arrival %d with --start-ms 1795946400000", a1[0])
	}
	var o, errb bytes.Buffer
	if code := realMain([]string{"gen", "--start-ms", "yesterday"}, &o, &errb); code != 2 {
		t.Errorf("--start-ms yesterday: exit %d, want 2", code)
	}
}

// TestGenToWarnsAboutAnOldTrace: gen --to with a start days ago warns
// that the recount will reject the clicks; with the default it does not.
func TestGenToWarnsAboutAnOldTrace(t *testing.T) {
	fake := kinesistest.NewFake()
	if _, err := fake.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String("clicks"), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	newKinesisHTTP(t, &kinesisHTTP{fake: fake})
	start := time.Now().Add(-72 * time.Hour).UnixMilli()
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--tail-fraction", "0"}, false},
		{[]string{"--start-ms", strconv.FormatInt(start, 10)}, true},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"gen", "--clicks", "300", "--to", "kinesis:clicks"}, tc.args...)
		if code := realMain(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errb.String())
		}
		if got := strings.Contains(errb.String(), "warning:"); got != tc.warn {
			t.Errorf("%v: warned %v, want %v; stderr:\n%s", args, got, tc.warn, errb.String())
		}
		if tc.warn && !strings.Contains(errb.String(), "before they were put") {
			t.Errorf("%v: the warning does not say why:\n%s", args, errb.String())
		}
	}
}
