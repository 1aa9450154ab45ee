package lease

import (
	"github.com/adclick/adclick/windowing"

	"regexp"
	"strings"
	"testing"
	"time"
)

func TestOptionsDefaults(t *testing.T) {
	o := Options{Table: "t-leases", Job: "j"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate after EnsureDefaults: %v", err)
	}
	if o.KeyGroupFrom != 0 || o.KeyGroupTo != windowing.MaxParallelism || o.Duration != DefaultDuration || o.Clock == nil || o.Logger == nil {
		t.Errorf("defaults %+v, want range 0-128, %v, a clock and a logger", o, DefaultDuration)
	}
	if !regexp.MustCompile(`^.+-[0-9]+-[0-9a-f]{8}$`).MatchString(o.Owner) {
		t.Errorf("default owner %q, want <host>-<pid>-<8 hex digits>", o.Owner)
	}
	if o2 := (&Options{}).EnsureDefaults(); o2.Owner == o.Owner {
		t.Errorf("two default owners are both %q, want unique ones", o.Owner)
	}
	if got := (&Options{Job: "j", KeyGroupFrom: 64, KeyGroupTo: 128}).Key(); got != "j#kg64-128" {
		t.Errorf("Key() = %q, want j#kg64-128", got)
	}
	if got := DefaultTable("ad_metrics"); got != "ad_metrics-leases" {
		t.Errorf("DefaultTable(ad_metrics) = %q, want ad_metrics-leases", got)
	}
}

// Validate reports every problem, not just the first.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want []string
	}{
		{"ok", Options{Table: "abc", Job: "j", Owner: "o", KeyGroupTo: 1, Duration: MinDuration, Clock: SystemClock()}, nil},
		{"everything wrong", Options{Table: "a", KeyGroupFrom: 5, KeyGroupTo: 5, Duration: time.Millisecond},
			[]string{"table name", "job name is empty", "key groups [5, 5)", "owner", "duration 1ms", "no clock", "no logger"}},
		{"range beyond 128", Options{Table: "abc", Job: "j", Owner: "o", KeyGroupFrom: 64, KeyGroupTo: 129, Duration: time.Second},
			[]string{"key groups [64, 129)"}},
		{"negative range", Options{Table: "abc", Job: "j", Owner: "o", KeyGroupFrom: -1, KeyGroupTo: 4, Duration: time.Second},
			[]string{"key groups [-1, 4)"}},
		{"long job", Options{Table: "abc", Job: strings.Repeat("j", 1001), Owner: "o", KeyGroupTo: 1, Duration: time.Second},
			[]string{"at most 1,000 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "everything wrong" {
				tc.o.EnsureDefaults()
			}
			err := tc.o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tc.want) {
				t.Errorf("Validate() reported %d problems, want %d:\n%v", n, len(tc.want), err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "lease: ") {
					t.Errorf("problem %q does not start with \"lease: \"", line)
				}
			}
		})
	}
}

func TestSystemClockIsMonotonic(t *testing.T) {
	c := SystemClock()
	a := c.Now()
	time.Sleep(time.Millisecond)
	if b := c.Now(); b <= a {
		t.Errorf("Now() went from %v to %v, want it to advance", a, b)
	}
}
