package s3lake

import "testing"

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, prefix string }{
		{"s3://b/p/q/", "b", "p/q"}, {"s3://b", "b", ""}, {"s3://b/", "b", ""},
	} {
		b, p, err := ParseURL(tc.in)
		if err != nil || b != tc.bucket || p != tc.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q, %q", tc.in, b, p, err, tc.bucket, tc.prefix)
		}
	}
	for _, bad := range []string{"b/p", "http://b/p", "s3:///p"} {
		if _, _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q): got nil error", bad)
		}
	}
}
