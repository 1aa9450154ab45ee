package kinesis_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/adclick/adclick/ingest/kinesis"
)

func names(prefix string, n int) []string {
	var ns []string
	for i := range n {
		ns = append(ns, fmt.Sprintf("%s-kg%d-%d", prefix, i, i+1))
	}
	return ns
}

func TestCheckConsumerRoom(t *testing.T) {
	for _, tc := range []struct {
		name       string
		registered []string
		want       []string
		err        string // in the error; "" fits
	}{
		{"10 ranges on an empty stream", nil, names("c", 10), ""},
		{"11 ranges on an empty stream", nil, names("c", 11), "it has 0 registered, 0 of them this job's; 11 more plus 11 for a blue/green copy make 22"},
		{"10 ranges already registered count once", names("c", 10), names("c", 10), ""},
		{"8 ranges beside 5 others", []string{"a", "b", "c", "d", "e"}, names("c", 8), "make 21"},
		{"7 ranges beside 5 others", []string{"a", "b", "c", "d", "e"}, names("c", 7), ""},
		{"green beside blue", names("blue", 10), names("green", 10), ""},
		{"green beside blue and one other", append(names("blue", 10), "x"), names("green", 10), "make 21"},
	} {
		err := kinesis.CheckConsumerRoom(tc.registered, tc.want)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: got %v, want no error", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.err)
		}
	}
}
