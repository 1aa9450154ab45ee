package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/ingest/kpl"
	"github.com/adclick/adclick/internal/testenv"
)

func lineHash(l string) string {
	h := sha256.Sum256([]byte(l))
	return hex.EncodeToString(h[:])
}

// putRecord is a user record as the stream holds it.
type putRecord struct {
	shard, pk, data string
}

// streamRecords returns the user records of the stream, shard by shard,
// deaggregating KPL records.
func streamRecords(t *testing.T, f *kinesistest.Fake, stream string) []putRecord {
	t.Helper()
	var out []putRecord
	for _, r := range f.Records(stream) {
		if len(r.PartitionKey) == 0 || utf8.RuneCountInString(r.PartitionKey) > serviceMaxPartitionKey {
			t.Errorf("record %s has a partition key of %d characters, want 1..%d", r.Seq, utf8.RuneCountInString(r.PartitionKey), serviceMaxPartitionKey)
		}
		if !kpl.IsAggregated(r.Data) {
			out = append(out, putRecord{r.Shard, r.PartitionKey, string(r.Data)})
			continue
		}
		if _, err := kpl.Deaggregate(r.Data, func(_ int, pk string, data []byte) error {
			out = append(out, putRecord{r.Shard, pk, string(data)})
			return nil
		}); err != nil {
			t.Fatalf("record %s: %v", r.Seq, err)
		}
	}
	return out
}

// TestPut puts click files into a 2-shard stream served over HTTP by the
// Kinesis fake (with the service's limits) and checks what arrived: every
// line except the blank ones and those over the 1 MiB record limit, each
// under its click id as partition key (a hash of the line when the click
// id is missing, unparseable or longer than 256 bytes), on the shard of its
// "shard" value; lines over the limit are reported by number and make the
// command fail after sending the rest.
func TestPut(t *testing.T) {
	long := strings.Repeat("k", 300)
	var hot []string
	for i := range 20 {
		hot = append(hot, testenv.ClickLine(fmt.Sprintf("h%02d", i), "hot", []string{"s0", "s1"}[i%2], testenv.ClickHourMs, 0))
	}
	type want struct {
		line  string
		pk    string
		shard string
	}
	// The stream's shards, in hash key order.
	const sh0, sh1 = "shardId-000000000000", "shardId-000000000001"
	boundary := testenv.SizedClickLine("c4", serviceMaxRecordBytes-len("c4")) // exactly 1 MiB with its partition key
	cases := []struct {
		name      string
		aggregate bool
		lines     []string
		want      []want
		code      int
		stderr    []string // substrings
	}{
		{
			name: "long_ids",
			lines: append([]string{
				testenv.ClickLine("c1", "hot", "s0", testenv.ClickHourMs, 0),
				testenv.ClickLine("c2", "hot", "s1", testenv.ClickHourMs, 0),
				testenv.ClickLine("c3", strings.Repeat("a", 300), "s0", testenv.ClickHourMs, 0), // ingest refuses it (id_too_long:ad_id); put sends it
				testenv.ClickLine(long, "hot", "s1", testenv.ClickHourMs, 0),
				"not json",
			}, hot...),
			code: 0,
		},
		{
			// Blank lines are no records (the file source skips them too);
			// an empty record would make the SDK refuse the whole call.
			name:  "blank_lines",
			lines: []string{testenv.ClickLine("c1", "hot", "s0", testenv.ClickHourMs, 0), "", "\r", testenv.ClickLine("c2", "hot", "s1", testenv.ClickHourMs, 0) + "\r", ""},
			code:  0,
		},
		{
			name: "oversized_lines",
			lines: []string{
				testenv.ClickLine("c1", "hot", "s0", testenv.ClickHourMs, 0),
				testenv.SizedClickLine("c2", serviceMaxRecordBytes+10),
				testenv.ClickLine("c3", "hot", "s1", testenv.ClickHourMs, 0),
				boundary,
				testenv.SizedClickLine("c5", 5<<20),
				testenv.ClickLine("c6", "hot", "s0", testenv.ClickHourMs, 0),
			},
			code:   1,
			stderr: []string{"line 2:", "line 5:", "skipped 2 of 6 lines"},
		},
		{
			name:      "oversized_lines_aggregated",
			aggregate: true,
			lines: []string{
				testenv.ClickLine("c1", "hot", "s0", testenv.ClickHourMs, 0),
				testenv.SizedClickLine("c2", serviceMaxRecordBytes+10),
				testenv.ClickLine("c3", "hot", "s1", testenv.ClickHourMs, 0),
				boundary, // fits a plain record, not one with KPL framing
				testenv.SizedClickLine("c5", 5<<20),
				testenv.ClickLine("c6", "hot", "s0", testenv.ClickHourMs, 0),
			},
			code:   1,
			stderr: []string{"line 2:", "line 4:", "line 5:", "skipped 3 of 6 lines"},
		},
	}
	cases[0].want = []want{
		{cases[0].lines[0], "c1", sh0}, {cases[0].lines[2], "c3", sh0}, {"not json", lineHash("not json"), sh0},
	}
	for i, l := range hot {
		if i%2 == 0 {
			cases[0].want = append(cases[0].want, want{l, fmt.Sprintf("h%02d", i), sh0})
		}
	}
	cases[0].want = append(cases[0].want, want{cases[0].lines[1], "c2", sh1}, want{cases[0].lines[3], lineHash(cases[0].lines[3]), sh1})
	for i, l := range hot {
		if i%2 == 1 {
			cases[0].want = append(cases[0].want, want{l, fmt.Sprintf("h%02d", i), sh1})
		}
	}
	cases[1].want = []want{{cases[1].lines[0], "c1", sh0}, {strings.TrimSuffix(cases[1].lines[3], "\r"), "c2", sh1}}
	cases[2].want = []want{{cases[2].lines[0], "c1", sh0}, {boundary, "c4", sh0}, {cases[2].lines[5], "c6", sh0}, {cases[2].lines[2], "c3", sh1}}
	cases[3].want = []want{{cases[3].lines[0], "c1", sh0}, {cases[3].lines[5], "c6", sh0}, {cases[3].lines[2], "c3", sh1}}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := kinesistest.NewFake()
			if _, err := fake.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String("clicks"), ShardCount: aws.Int32(2)}); err != nil {
				t.Fatal(err)
			}
			newKinesisHTTP(t, &kinesisHTTP{fake: fake})
			path := filepath.Join(t.TempDir(), "clicks.jsonl")
			if err := os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"put", "--from", path, "--to", "kinesis:clicks"}
			if tc.aggregate {
				args = append(args, "--aggregate")
			}
			var stdout, stderr bytes.Buffer
			code := realMain(args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%.2000s", code, tc.code, stdout.String(), stderr.String())
			}
			t.Logf("stdout:\n%s\nstderr:\n%.2000s", stdout.String(), stderr.String())
			out := stdout.String() + stderr.String()
			if n := len(tc.want); !strings.Contains(out, fmt.Sprintf("put %d records into clicks", n)) {
				t.Errorf("output does not say %q:\n%.2000s", fmt.Sprintf("put %d records into clicks", n), out)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not contain %q:\n%.2000s", s, stderr.String())
				}
			}
			got := streamRecords(t, fake, "clicks")
			if len(got) != len(tc.want) {
				t.Fatalf("got %d records in the stream, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.data != w.line || g.pk != w.pk || g.shard != w.shard {
					t.Errorf("record %d: got %.60q with key %.70q on %s, want %.60q with key %.70q on %s", i, g.data, g.pk, g.shard, w.line, w.pk, w.shard)
				}
			}
			if tc.name == "long_ids" {
				keys := map[string]bool{}
				for _, g := range got {
					if strings.Contains(g.data, `"ad_id":"hot"`) {
						keys[g.pk] = true
					}
				}
				if len(keys) < len(hot) {
					t.Errorf("the hot ad's %d clicks have %d distinct partition keys, want one per click", len(hot)+3, len(keys))
				}
			}
		})
	}
}

// TestPutFailureSaysWhatWasWritten makes the stream vanish after two
// PutRecords calls and checks that the error names the records confirmed
// written and the last line among them.
func TestPutFailureSaysWhatWasWritten(t *testing.T) {
	fake := kinesistest.NewFake()
	if _, err := fake.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String("clicks"), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	left := new(atomic.Int64)
	left.Store(2)
	newKinesisHTTP(t, &kinesisHTTP{fake: fake, putsLeft: left})
	var b strings.Builder
	b.WriteString("\n") // line 1 is blank: line numbers count it
	for i := range 1200 {
		b.WriteString(testenv.ClickLine(fmt.Sprintf("c%d", i), "hot", "s0", testenv.ClickHourMs, 0) + "\n")
	}
	path := filepath.Join(t.TempDir(), "clicks.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"put", "--from", path, "--to", "kinesis:clicks"}, &stdout, &stderr); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	t.Logf("stderr:\n%s", stderr.String())
	want := "1000 records confirmed written, through line 1001"
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
	}
	if got := len(fake.Records("clicks")); got != 1000 {
		t.Errorf("got %d records in the stream, want 1000", got)
	}
}

// TestEachLine checks line splitting, numbering and the size limit.
func TestEachLine(t *testing.T) {
	type line struct {
		n    int
		text string
		size int
	}
	for _, tc := range []struct {
		name  string
		in    string
		limit int
		want  []line
	}{
		{"empty", "", 10, nil},
		{"one_newline", "\n", 10, []line{{1, "", 0}}},
		{"no_final_newline", "a\nbc", 10, []line{{1, "a", 1}, {2, "bc", 2}}},
		{"crlf_and_blank", "a\r\n\r\n\nb\r\n", 10, []line{{1, "a", 1}, {2, "", 0}, {3, "", 0}, {4, "b", 1}}},
		{"cr_inside_kept", "a\rb\n", 10, []line{{1, "a\rb", 3}}},
		{"at_limit", "0123456789\n", 10, []line{{1, "0123456789", 10}}},
		{"over_limit_cut", "0123456789abcdef\nx", 10, []line{{1, "0123456789ab", 16}, {2, "x", 1}}},
		{"huge_line", strings.Repeat("z", 300_000) + "\r\nok", 100, []line{{1, strings.Repeat("z", 102), 300_000}, {2, "ok", 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []line
			err := eachLine(strings.NewReader(tc.in), tc.limit, func(n int, l []byte, size int) error {
				got = append(got, line{n, string(l), size})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %.200v, want %.200v", got, tc.want)
			}
		})
	}
}

// TestPutWarnsAboutClicksBeyondTheHorizon: clicks whose impression is
// more than the horizon (and the allowance) before now are put, but the
// command warns that the job and the recount will reject them, with their
// number.
func TestPutWarnsAboutClicksBeyondTheHorizon(t *testing.T) {
	fake := kinesistest.NewFake()
	if _, err := fake.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String("clicks"), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	newKinesisHTTP(t, &kinesisHTTP{fake: fake})
	now := time.Now().UnixMilli()
	line := func(id string, impressionMs int64) string { return testenv.ClickLine(id, "ad", "s0", impressionMs, 0) }
	lines := []string{line("old1", now-3*3_600_000), line("new1", now-60_000), line("old2", now-50*3_600_000), "not json",
		line("new2", now), line("old3", now-7_300_000)}
	path := filepath.Join(t.TempDir(), "clicks.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // "" = no warning
	}{
		{nil, "adclick put: warning: 3 of 5 valid clicks have an impression more than 2h0m0s (horizon) + 5s (allowance) before they were put (the oldest 50h0m0s before"},
		{[]string{"--horizon-ms", "14400000"}, "adclick put: warning: 1 of 5 valid clicks have an impression more than 4h0m0s (horizon) + 5s (allowance) before"},
		{[]string{"--horizon-ms", "200000000"}, ""},
	} {
		var stdout, stderr bytes.Buffer
		if code := realMain(append([]string{"put", "--from", path, "--to", "kinesis:clicks"}, tc.args...), &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d\n%s", tc.args, code, stderr.String())
		}
		if tc.want == "" && strings.Contains(stderr.String(), "warning") || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, stderr.String(), tc.want)
		}
		if !strings.Contains(stdout.String(), "put 6 records into clicks") {
			t.Errorf("%v: stdout %q, want all 6 records put", tc.args, stdout.String())
		}
	}
}
