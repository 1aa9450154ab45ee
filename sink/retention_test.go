package sink

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionExpiresAt(t *testing.T) {
	const day = 24 * time.Hour
	def := Retention{}
	def.EnsureDefaults()
	minuteEnd := time.Date(2026, 11, 29, 10, 15, 0, 0, time.UTC).Unix()
	hourEnd := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC).Unix()
	for _, c := range []struct {
		name   string
		r      Retention
		bucket string
		want   int64
		ok     bool
	}{
		{"default minute", def, "M2026-11-29T10:14Z", minuteEnd + 35*86400, true},
		{"default hour", def, "H2026-11-29T10Z", hourEnd + 400*86400, true},
		{"set minute", Retention{Minute: 3 * day, Hour: Forever}, "M2026-11-29T10:14Z", minuteEnd + 3*86400, true},
		{"forever hour", Retention{Minute: 3 * day, Hour: Forever}, "H2026-11-29T10Z", 0, false},
		{"bad bucket", def, "X2026", 0, false},
	} {
		got, ok := c.r.ExpiresAt(c.bucket)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: ExpiresAt(%q) = %d, %v; want %d, %v", c.name, c.bucket, got, ok, c.want, c.ok)
		}
	}
}

func TestRetentionDaysAndValidate(t *testing.T) {
	if got, want := RetentionDays(35, 0), (Retention{Minute: 35 * 24 * time.Hour, Hour: Forever}); got != want {
		t.Errorf("RetentionDays(35, 0) = %+v, want %+v", got, want)
	}
	var r Retention
	r.EnsureDefaults()
	if r.Minute != DefaultMinuteRetention || r.Hour != DefaultHourRetention {
		t.Errorf("EnsureDefaults = %+v", r)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("Validate of the defaults: %v", err)
	}
	if err := RetentionDays(0, 0).Validate(); err != nil {
		t.Errorf("Validate(forever): %v", err)
	}
	err := RetentionDays(2, 9).Validate()
	if err == nil || !strings.Contains(err.Error(), "minute retention") || !strings.Contains(err.Error(), "hour retention") {
		t.Errorf("Validate(2 days, 9 days) = %v, want both reported", err)
	}
	if err := RetentionDays(3, 10).Validate(); err != nil {
		t.Errorf("Validate at the floors: %v", err)
	}
}
