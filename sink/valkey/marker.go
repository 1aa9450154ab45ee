package valkey

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Values of the marker key.
const (
	markerArmed     = "ok"
	markerRebuild   = "rebuild"
	markerKeySuffix = ":marker"
)

// marker returns the key of the marker: <p>:marker, or <p>:marker:<scope>
// in a scope, so that each range pipeline detects a wipe, and re-arms
// after its own rebuild, apart from the others.
func (k keys) marker() string {
	if k.scope == "" {
		return k.prefix + markerKeySuffix
	}
	return k.prefix + markerKeySuffix + ":" + k.scope
}

// Wiped reports whether the store may have lost totals since it was last
// armed: true when the marker key is missing (the server restarted without
// its data, was flushed, or replaced, or the marker was never armed on this
// prefix) or when a rebuild begun with BeginRebuild has not been completed
// with Arm. It is one round trip (GETEX): when the marker is armed it also
// renews its expiry (Options.EpochTTL), so a job that checks at least once
// per EpochTTL never sees a marker expire under it.
//
// Each index scope has its own marker (Scoped): the view of a range
// pipeline reports the wipe to that range until the range itself has
// rebuilt and armed, whatever the other ranges did.
//
// The marker is one key, so in cluster mode it detects the loss of the node
// that holds its slot only; a node that restarts empty while the others
// keep their data goes unnoticed. With an eviction policy that evicts keys
// without an expiry first or at random (allkeys-*), the marker may be evicted
// and Wiped then reports true: a needless, harmless rebuild. Totals evicted
// one by one are not detected.
//
// The intended use (see the package documentation):
//
//	if wiped, err := s.Wiped(ctx); err == nil && wiped {
//		s.BeginRebuild(ctx)
//		// rewrite what the store should hold (flush.RebuildTotals, and the
//		// open windows from state)
//		if armed, err := s.Arm(ctx); err == nil && !armed {
//			// wiped again during the rebuild: start over
//		}
//	}
func (s *Store) Wiped(ctx context.Context) (bool, error) {
	defer s.track(opMarker, time.Now())
	res, err := s.roundTrip(ctx, opMarker, valkey.Commands{
		s.c.B().Getex().Key(s.k.marker()).PxMilliseconds(s.opts.EpochTTL.Milliseconds()).Build()})
	if err != nil {
		return false, fmt.Errorf("valkey: check marker: %w", err)
	}
	v, err := res[0].ToString()
	if valkey.IsValkeyNil(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("valkey: check marker: %w", err)
	}
	return v != markerArmed, nil
}

// BeginRebuild records that a rebuild of the store's totals has begun: the
// marker holds "rebuild" (with expiry Options.EpochTTL) until Arm, so Wiped
// keeps reporting true if the caller dies before the rebuild completes. A
// wipe during the rebuild deletes the marker, which Arm then finds.
func (s *Store) BeginRebuild(ctx context.Context) error {
	defer s.track(opMarker, time.Now())
	_, err := s.roundTrip(ctx, opMarker, valkey.Commands{
		s.c.B().Set().Key(s.k.marker()).Value(markerRebuild).PxMilliseconds(s.opts.EpochTTL.Milliseconds()).Build()})
	if err != nil {
		return fmt.Errorf("valkey: begin rebuild: %w", err)
	}
	return nil
}

// Arm marks the store as holding everything it should (the rebuild begun
// with BeginRebuild is complete): the marker holds "ok", with expiry
// Options.EpochTTL. It sets the marker only if it still exists (SET XX; if
// a first attempt was applied and its reply lost, the second finds the
// marker and succeeds too):
// armed is false when it is gone, which means the store was wiped again
// since BeginRebuild (or BeginRebuild was never called) and the caller
// must begin a new rebuild.
func (s *Store) Arm(ctx context.Context) (armed bool, err error) {
	defer s.track(opMarker, time.Now())
	res, err := s.roundTrip(ctx, opMarker, valkey.Commands{
		s.c.B().Set().Key(s.k.marker()).Value(markerArmed).Xx().PxMilliseconds(s.opts.EpochTTL.Milliseconds()).Build()})
	if err != nil {
		return false, fmt.Errorf("valkey: arm marker: %w", err)
	}
	if err := res[0].Error(); valkey.IsValkeyNil(err) {
		return false, nil
	}
	return true, nil
}

// TTLs returns the expiries the store sets on minute and hour totals
// (Options.MinuteTTL and Options.HourTTL): a rebuild needs to rewrite no
// total older than that.
func (s *Store) TTLs() (minute, hour time.Duration) {
	return s.opts.MinuteTTL, s.opts.HourTTL
}
