package ckptstore

import (
	"testing"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

func TestParseSavepointLocation(t *testing.T) {
	r := &Remote{bucket: "adclick-state", prefix: "job1/"}
	loc := r.Location(51, ckpt.Savepoint)
	url, id, ok := ParseSavepointLocation(loc)
	if !ok || url != "s3://adclick-state/job1" || id != 51 {
		t.Fatalf("ParseSavepointLocation(%q) = %q, %d, %v; want s3://adclick-state/job1, 51, true", loc, url, id, ok)
	}
	for _, bad := range []string{
		"51",
		"/data/savepoints/sp-51",
		"s3://adclick-state/job1",
		r.Location(51, ckpt.Checkpoint),
		"s3://adclick-state/job1/manifests/sp-.json",
		"s3://adclick-state/job1/manifests/sp-12x.json",
		"s3://adclick-state/job1/manifests/sp-000000000051.json/more",
		"s3://adclick-state/job1/manifests/sp-000000000051",
	} {
		if url, id, ok := ParseSavepointLocation(bad); ok {
			t.Errorf("ParseSavepointLocation(%q) = %q, %d, true; want false", bad, url, id)
		}
	}
}
