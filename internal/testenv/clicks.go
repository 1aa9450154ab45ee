package testenv

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ClickHourMs is 2026-11-29T10:00Z, the impression time of SizedClickLine's
// clicks.
const ClickHourMs int64 = 1_795_946_400_000

// ClickLine returns a file-source line (JSON, keys in sorted order) of a
// valid click of ad, campaign "cmp" and device "dev" on shard, whose
// impression is at impressionMs, its device time 100 ms and its arrival
// 200 ms later, for 1000 µ of spend; pad > 0 adds an unknown field "pad"
// of that many bytes.
func ClickLine(clickID, ad, shard string, impressionMs int64, pad int) string {
	m := map[string]any{"click_id": clickID, "ad_id": ad, "campaign_id": "cmp", "device_id": "dev", "impression_ms": impressionMs,
		"device_ms": impressionMs + 100, "spend_micros": 1000, "shard": shard, "arrival_ms": impressionMs + 200}
	if pad > 0 {
		m["pad"] = strings.Repeat("p", pad)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// SizedClickLine returns a ClickLine of ad "hot" on shard "s0" at
// ClickHourMs that is exactly n bytes long, padded as needed. It panics if
// n is too short for the click's fields.
func SizedClickLine(clickID string, n int) string {
	base := len(ClickLine(clickID, "hot", "s0", ClickHourMs, 1)) - 1
	l := ClickLine(clickID, "hot", "s0", ClickHourMs, n-base)
	if len(l) != n {
		panic(fmt.Sprintf("testenv: SizedClickLine: %d bytes, want %d", len(l), n))
	}
	return l
}
