package dynamo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// FenceMarkEntity is the entity of the fence mark items (sink.FenceAheadError
// says what a mark is): one item per generation g, key FenceMarkEntity +
// FenceMarkBucket(g), holding a number attribute k<kg> for each key group
// marked and a version v that every raise increments.
//
// Ad ids are any 1 to 256 bytes of UTF-8 (package ingest), so no entity is
// out of their reach, "#fences" included: what keeps a mark's key apart
// from every row's is its bucket, "g<gen>", since a row's bucket is always
// a minute "M…" or an hour "H…" (sink.ParseBucket). A mark item carries no
// tag index key, no bucket_shard and no expires_at, so it is in no index
// and TTL never deletes it; Scan leaves it out, and BackfillBucketShards
// does not touch it.
const FenceMarkEntity = "#fences"

// FenceMarkBucket returns the bucket of generation gen's fence mark item,
// "g<gen>".
func FenceMarkBucket(gen int64) string { return "g" + strconv.FormatInt(gen, 10) }

// isFenceMark reports whether k is the key of a fence mark item.
func isFenceMark(k sink.Key) bool {
	return k.Entity == FenceMarkEntity && strings.HasPrefix(k.Bucket, "g")
}

const attrMarkVersion = "v"

// markAttr returns the attribute of key group kg's mark, "k<kg>".
func markAttr(kg int) string { return "k" + strconv.Itoa(kg) }

// maxMarkAttempts bounds the reads and conditional writes of one
// RaiseFenceMark when other raises keep changing the item between its read
// and its write (every range of a fleet raises the same item when it
// starts; each round, one of them wins).
const maxMarkAttempts = 64

// RaiseFenceMark raises the fence marks of key groups [from, to) under
// generation gen to fence (see sink.FenceAheadError): a consistent read of
// the generation's mark item, then, unless every mark of the range is at
// fence already, one UpdateItem that sets them and increments the item's
// version, conditioned on the version read (on its absence for a new
// item). When another raise changed the item in between, it reads again,
// up to maxMarkAttempts times. A mark of the range above fence refuses the
// raise with an error wrapping a *sink.FenceAheadError, and nothing is
// written. Marks of the other key groups are left as they are.
//
// It goes through the Store's retries and in-flight bound like every other
// request, and is safe for concurrent use.
func (s *Store) RaiseFenceMark(ctx context.Context, gen int64, from, to int, fence int64) error {
	if err := sink.ValidFenceMark(gen, from, to, fence); err != nil {
		return fmt.Errorf("dynamo: raise fence mark: %w", err)
	}
	k := sink.Key{Entity: FenceMarkEntity, Bucket: FenceMarkBucket(gen)}
	for attempt := 1; ; attempt++ {
		marks, version, versioned, err := s.readMarks(ctx, gen)
		if err != nil {
			return fmt.Errorf("dynamo: raise fence mark: %w", err)
		}
		if ahead := sink.FenceMarkAhead(marks, gen, from, to, fence); ahead != nil {
			return fmt.Errorf("dynamo: raise fence mark in table %s: %w", s.o.Table, ahead)
		}
		var set []string
		for kg := from; kg < to; kg++ {
			if m, ok := marks[kg]; !ok || m < fence {
				set = append(set, markAttr(kg)+" = :f")
			}
		}
		if len(set) == 0 {
			return nil // marked already
		}
		cond := "attribute_not_exists(#v)"
		vals := map[string]types.AttributeValue{":f": num(fence), ":v1": num(version + 1)}
		if versioned {
			cond = "#v = :v"
			vals[":v"] = num(version)
		}
		update := "SET #v = :v1, " + strings.Join(set, ", ")
		ok, err := s.update(ctx, "raise_fence_mark", k, update, cond, map[string]string{"#v": attrMarkVersion}, vals)
		if err != nil {
			return fmt.Errorf("dynamo: raise fence mark: %w", err)
		}
		if ok {
			s.m.writes.WithLabelValues("raise_fence_mark").Inc()
			return nil
		}
		// Another raise wrote the item since the read.
		if attempt >= maxMarkAttempts {
			return fmt.Errorf("dynamo: raise fence mark in table %s: the mark item of job_gen %d changed under each of %d attempts", s.o.Table, gen, attempt)
		}
		if err := sleep(ctx, backoff(s.o.BaseBackoff, s.o.MaxBackoff, min(attempt, 4))); err != nil {
			return fmt.Errorf("dynamo: raise fence mark: %w", err)
		}
	}
}

// FenceMarks returns the fence marks of generation gen by key group (a
// consistent read): empty when no range has raised one.
func (s *Store) FenceMarks(ctx context.Context, gen int64) (map[int]int64, error) {
	marks, _, _, err := s.readMarks(ctx, gen)
	if err != nil {
		return nil, fmt.Errorf("dynamo: read fence marks: %w", err)
	}
	return marks, nil
}

// readMarks reads generation gen's mark item: its marks, and its version
// if it has one (versioned is false when there is no item).
func (s *Store) readMarks(ctx context.Context, gen int64) (marks map[int]int64, version int64, versioned bool, err error) {
	k := sink.Key{Entity: FenceMarkEntity, Bucket: FenceMarkBucket(gen)}
	item, err := s.getItem(ctx, "get_fence_mark", k)
	if err != nil {
		return nil, 0, false, err
	}
	marks = map[int]int64{}
	if len(item) == 0 {
		return marks, 0, false, nil
	}
	if version, versioned, err = getN(item, attrMarkVersion); err != nil {
		return nil, 0, false, fmt.Errorf("mark item of job_gen %d in table %s: %w", gen, s.o.Table, err)
	}
	for kg := range windowing.MaxParallelism {
		m, ok, err := getN(item, markAttr(kg))
		if err != nil {
			return nil, 0, false, fmt.Errorf("mark item of job_gen %d in table %s: %w", gen, s.o.Table, err)
		}
		if ok {
			marks[kg] = m
		}
	}
	return marks, version, versioned, nil
}
