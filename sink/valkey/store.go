package valkey

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/adclick/adclick/sink"
)

// Store is the Valkey implementation of sink.Totals. All methods are safe for
// concurrent use. See the package documentation for the key layout and the
// availability contract.
type Store struct {
	c       valkey.Client
	own     bool // Close closes c
	opts    Options
	k       keys
	m       *metrics
	closeMu sync.Once
}

var _ sink.FencedTotals = (*Store)(nil)

// New connects to the server at opts.Addr. With a standalone server (the
// default) it succeeds even when the server is unreachable: the store then
// starts down (adclick_valkey_up 0) and connects on first use. It returns an
// error for invalid options, for a metrics registration failure, and, with
// opts.Cluster, when the cluster cannot be reached to learn its slots.
func New(ctx context.Context, opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Addr == "" {
		return nil, errors.New("valkey: options: no address")
	}
	co := valkey.ClientOption{
		InitAddress: []string{opts.Addr},
		Username:    opts.Username,
		Password:    opts.Password,
		TLSConfig:   opts.TLS,
		// The store never reads through the client-side cache (no DoCache),
		// and some servers and proxies refuse CLIENT TRACKING; see doc.go.
		DisableCache: true,
		// Fail fast; the runtime retries later and rewrites from state.
		DisableRetry:      true,
		ConnWriteTimeout:  opts.Timeout,
		ForceSingleClient: !opts.Cluster,
	}
	co.Dialer.Timeout = opts.DialTimeout
	c, err := valkey.NewClient(co)
	if c == nil {
		return nil, fmt.Errorf("valkey: connect %s: %w", opts.Addr, err)
	}
	s, err2 := newStore(c, true, opts)
	if err2 != nil {
		c.Close()
		return nil, err2
	}
	if err != nil {
		// Only a standalone client gets here: it redials on first use.
		s.m.up.Set(0)
		return s, nil
	}
	_ = s.Ping(ctx) // sets adclick_valkey_up; a failure is not fatal
	return s, nil
}

// NewWithClient returns a store that uses c, which the caller configured
// and keeps owning: Close does not close it. opts.Addr, Cluster, Username,
// Password, TLS and DialTimeout are ignored.
func NewWithClient(c valkey.Client, opts Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("valkey: nil client")
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return newStore(c, false, opts)
}

func newStore(c valkey.Client, own bool, opts Options) (*Store, error) {
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Store{c: c, own: own, opts: opts, k: keys{prefix: opts.Prefix}, m: m}, nil
}

// Scoped returns a view of the store with the index scope scope (see
// sink.ValidateScope): its SetTotals records keys in the epoch sets
// <prefix>:ep:<scope>:<epoch> and the registry <prefix>:epochs:<scope>,
// which its TotalsWritten reads, its ForgetEpochs drops and its
// DeleteTotals forgets keys from, so a range pipeline's flush sees only
// its own bookkeeping. The totals themselves (<prefix>:m:{<ad>}:…), the
// marker, the client and the metrics are shared with s. Scope "" gives
// the unscoped layout; scopes do not nest: s.Scoped(a).Scoped(b) is
// s.Scoped(b). A view never closes the client: close s.
func (s *Store) Scoped(scope string) (*Store, error) {
	if err := sink.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("valkey: %w", err)
	}
	return &Store{c: s.c, opts: s.opts, k: keys{prefix: s.k.prefix, scope: scope}, m: s.m}, nil
}

// ScopedTotals is Scoped as a sink.Totals (a fleet's range views).
func (s *Store) ScopedTotals(scope string) (sink.Totals, error) {
	v, err := s.Scoped(scope)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Scope returns the store's index scope, "" when unscoped.
func (s *Store) Scope() string { return s.k.scope }

// Close closes the client if New created it (never on a view made by
// Scoped). It is safe to call more than once; the store and its views must
// not be used afterwards.
func (s *Store) Close() {
	s.closeMu.Do(func() {
		if s.own {
			s.c.Close()
		}
	})
}

// Ping checks the server within Options.Timeout and updates
// adclick_valkey_up.
func (s *Store) Ping(ctx context.Context) error {
	defer s.track(opPing, time.Now())
	if _, err := s.roundTrip(ctx, opPing, valkey.Commands{s.c.B().Ping().Build()}); err != nil {
		return fmt.Errorf("valkey: ping: %w", err)
	}
	return nil
}

// tokenPrelude reads the stored token of KEYS[1] into g and f ('0' when
// absent) and defines above(a, b), the order of decimal strings.
const tokenPrelude = `
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local cur = redis.call('HMGET', KEYS[1], 'gen', 'fence')
local g, f = cur[1] or '0', cur[2] or '0'
`

// setScript writes one total unless the key holds a higher (gen, fence):
// KEYS[1] the total, ARGV valid, spend_micros, ckpt, gen, fence (decimal,
// ≥ 0) and the expiry in ms. It returns 1 when it wrote, 0 when it refused.
// Generations and fences are compared as decimal strings (by length, then
// bytes), so exactly for every int64, not as Lua's doubles. A total without
// gen and fence (written before fences) holds the token (0, 0).
const setScript = tokenPrelude + `if above(g, ARGV[4]) or (g == ARGV[4] and above(f, ARGV[5])) then
  return 0
end
redis.call('HSET', KEYS[1], 'valid', ARGV[1], 'spend_micros', ARGV[2], 'ckpt', ARGV[3], 'gen', ARGV[4], 'fence', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`

// delScript deletes one total unless it holds a higher (gen, fence):
// KEYS[1] the total, ARGV gen and fence. It returns 1 when the key is gone
// (deleted, or missing), 0 when it refused.
const delScript = tokenPrelude + `if above(g, ARGV[1]) or (g == ARGV[1] and above(f, ARGV[2])) then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
`

// script is a Lua script sent with EVALSHA in pipelines, and with EVAL
// (which also caches it on the node) for the commands a server answered
// NOSCRIPT (a restarted or new server, a SCRIPT FLUSH, a node added to a
// cluster). valkey-go's script helper does the same one command at a time
// (Lua.Exec), or loads the script on every node before each pipeline
// (Lua.ExecMulti, a round trip more per call, outside the store's retry of
// stale connections), so the store builds the commands itself.
type script struct {
	src, sha string
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	setTotal = newScript(setScript)
	delTotal = newScript(delScript)
)

// SetTotals is SetTotalsFenced under the zero token: it writes totals
// stored without a token and refuses those stored under a higher one.
func (s *Store) SetTotals(ctx context.Context, ts []sink.Total) error {
	_, err := s.SetTotalsFenced(ctx, ts, sink.Token{})
	return err
}

// SetTotalsFenced writes the totals as absolute values (valid,
// spend_micros, ckpt, and the token's gen and fence; never HINCRBY) with
// their TTL, each by one single-key script that refuses the write when the
// key holds a higher (gen, fence) (setScript; refusals are counted in
// adclick_valkey_totals_refused_total), and records each key in the set of
// its epoch. The epoch sets are written first, in their own round trip, so
// that a value is never present without its record; then the values follow
// in pipelines of Options.BatchSize totals. On error some totals may have
// been written; writing them again is harmless. A total whose start is not
// a whole minute (hour) in years 1970..9999 is refused before anything is
// sent.
func (s *Store) SetTotalsFenced(ctx context.Context, ts []sink.Total, tok sink.Token) (refused int, err error) {
	if len(ts) == 0 {
		return 0, nil
	}
	if err := sink.ValidFence(tok.Fence); err != nil {
		return 0, fmt.Errorf("valkey: set totals: %w", err)
	}
	defer s.track(opSet, time.Now())
	names := make([]string, len(ts))
	byEpoch := map[int64][]string{}
	for i, t := range ts {
		name, err := s.k.total(t.Key())
		if err != nil {
			return 0, fmt.Errorf("valkey: set totals: total %d (ad %q): %w", i, t.Ad, err)
		}
		names[i] = name
		byEpoch[t.Epoch] = append(byEpoch[t.Epoch], name)
	}

	// First the bookkeeping.
	epochTTL := s.opts.EpochTTL.Milliseconds()
	reg := s.c.B().Zadd().Key(s.k.epochs()).ScoreMember()
	cmds := valkey.Commands{}
	for e, members := range byEpoch {
		reg = reg.ScoreMember(float64(e), strconv.FormatInt(e, 10))
		key := s.k.epoch(e)
		for chunk := range chunks(members, s.opts.BatchSize) {
			cmds = append(cmds, s.c.B().Sadd().Key(key).Member(chunk...).Build())
		}
		cmds = append(cmds, s.c.B().Pexpire().Key(key).Milliseconds(epochTTL).Build())
	}
	cmds = append(cmds, reg.Build(), s.c.B().Pexpire().Key(s.k.epochs()).Milliseconds(epochTTL).Build())
	if err := s.roundTrips(ctx, opSet, cmds); err != nil {
		return 0, fmt.Errorf("valkey: set totals: record epochs: %w", err)
	}

	// Then the values, BatchSize totals (one script call each) per round
	// trip.
	minTTL, hourTTL := strconv.FormatInt(s.opts.MinuteTTL.Milliseconds(), 10), strconv.FormatInt(s.opts.HourTTL.Milliseconds(), 10)
	gen, fence := strconv.FormatInt(tok.Gen, 10), strconv.FormatInt(tok.Fence, 10)
	execs := make([]valkey.LuaExec, 0, min(len(ts), s.opts.BatchSize))
	for lo := 0; lo < len(ts); lo += s.opts.BatchSize {
		hi := min(lo+s.opts.BatchSize, len(ts))
		execs = execs[:0]
		for i := lo; i < hi; i++ {
			t := ts[i]
			ttl := minTTL
			if t.Hour {
				ttl = hourTTL
			}
			execs = append(execs, valkey.LuaExec{Keys: []string{names[i]}, Args: []string{
				strconv.FormatInt(t.Valid, 10), strconv.FormatInt(t.SpendMicros, 10), strconv.FormatInt(t.Epoch, 10),
				gen, fence, ttl}})
		}
		done, err := s.eval(ctx, opSet, setTotal, execs)
		if err != nil {
			return refused, fmt.Errorf("valkey: set totals: write %d of %d: %w", lo, len(ts), err)
		}
		n := 0
		for _, ok := range done {
			if ok {
				n++
			}
		}
		refused += len(done) - n
		s.m.written.Add(float64(n))
		s.m.refused.WithLabelValues(opSet).Add(float64(len(done) - n))
	}
	return refused, nil
}

// eval runs sc once for each of execs, pipelined in one round trip of
// EVALSHA (roundTrip: bounded by Options.Timeout, sent again after a stale
// connection, which is safe since both scripts give the same result when
// applied twice). The executions a server answered NOSCRIPT go again, in
// one round trip of EVAL.
// done[i] reports whether execs[i] wrote (reply 1) rather than refused
// (reply 0).
func (s *Store) eval(ctx context.Context, op string, sc script, execs []valkey.LuaExec) (done []bool, err error) {
	cmds := make(valkey.Commands, len(execs))
	for i, e := range execs {
		cmds[i] = s.c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
	}
	res, err := s.roundTripKeep(ctx, op, cmds, noScript)
	if err != nil {
		return nil, err
	}
	var again []int
	for i, r := range res {
		if noScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		retry := make(valkey.Commands, len(again))
		for j, i := range again {
			e := execs[i]
			retry[j] = s.c.B().Eval().Script(sc.src).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
		}
		res2, err := s.roundTrip(ctx, op, retry)
		if err != nil {
			return nil, err
		}
		for j, i := range again {
			res[i] = res2[j]
		}
	}
	done = make([]bool, len(res))
	for i, r := range res {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("script reply: %w", err)
		}
		done[i] = n == 1
	}
	return done, nil
}

// noScript reports whether err is the server's NOSCRIPT reply to EVALSHA.
func noScript(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}

// GetTotal returns the total at k; ok is false if there is none.
func (s *Store) GetTotal(ctx context.Context, k sink.TotalKey) (sink.Total, bool, error) {
	defer s.track(opGet, time.Now())
	name, err := s.k.total(k)
	if err != nil {
		return sink.Total{}, false, fmt.Errorf("valkey: get total: %w", err)
	}
	res, err := s.roundTrip(ctx, opGet, valkey.Commands{s.c.B().Hmget().Key(name).Field(fieldValid, fieldSpend, fieldCkpt).Build()})
	if err != nil {
		return sink.Total{}, false, fmt.Errorf("valkey: get total %s: %w", name, err)
	}
	vals, err := res[0].ToArray()
	if err != nil || len(vals) != 3 {
		return sink.Total{}, false, fmt.Errorf("valkey: get total %s: unexpected reply (%d values): %v", name, len(vals), err)
	}
	var nums [3]int64
	missing := 0
	for i := range vals {
		if vals[i].IsNil() {
			missing++
			continue
		}
		str, err := vals[i].ToString()
		if err == nil {
			nums[i], err = strconv.ParseInt(str, 10, 64)
		}
		if err != nil {
			return sink.Total{}, false, fmt.Errorf("valkey: get total %s: field %d: %w", name, i, err)
		}
	}
	switch missing {
	case 3:
		return sink.Total{}, false, nil
	case 0:
		return sink.Total{Ad: k.Ad, StartMs: k.StartMs, Hour: k.Hour, Valid: nums[0], SpendMicros: nums[1], Epoch: nums[2]}, true, nil
	}
	return sink.Total{}, false, fmt.Errorf("valkey: get total %s: %d of its 3 fields are missing", name, missing)
}

// TotalsWritten calls fn once for every key in the set of epoch, reading the
// set with SSCAN in pages of Options.BatchSize. fn runs between pages, may
// call back into the store (delete or rewrite keys), and its time does not
// count against Options.Timeout. A member that is not a total key under the
// store's prefix is an error.
func (s *Store) TotalsWritten(ctx context.Context, epoch int64, fn func(sink.TotalKey) error) error {
	defer s.track(opList, time.Now())
	key := s.k.epoch(epoch)
	seen := map[string]struct{}{} // SSCAN may return a member twice
	var cursor uint64
	for {
		res, err := s.roundTrip(ctx, opList, valkey.Commands{s.c.B().Sscan().Key(key).Cursor(cursor).Count(int64(s.opts.BatchSize)).Build()})
		if err != nil {
			return fmt.Errorf("valkey: totals written %d: %w", epoch, err)
		}
		page, err := res[0].AsScanEntry()
		if err != nil {
			return fmt.Errorf("valkey: totals written %d: %w", epoch, err)
		}
		for _, m := range page.Elements {
			if _, dup := seen[m]; dup {
				continue
			}
			seen[m] = struct{}{}
			k, err := s.k.parseTotal(m)
			if err != nil {
				return fmt.Errorf("valkey: totals written %d: %w", epoch, err)
			}
			if err := fn(k); err != nil {
				return err
			}
		}
		if cursor = page.Cursor; cursor == 0 {
			return nil
		}
	}
}

// DeleteTotals is DeleteTotalsFenced under the zero token.
func (s *Store) DeleteTotals(ctx context.Context, ks []sink.TotalKey) error {
	_, err := s.DeleteTotalsFenced(ctx, ks, sink.Token{})
	return err
}

// DeleteTotalsFenced deletes the totals, each by one single-key script that
// refuses when the key holds a higher (gen, fence) than tok (delScript;
// refusals are counted in adclick_valkey_totals_refused_total), then
// removes the deleted ones from every epoch set in the registry of the
// store's scope (other scopes' sets keep them; a refused total stays
// listed). The values go first so that a failure leaves, at worst, a
// record without a value (harmless) and never a value without its record.
// A DeleteTotals racing a SetTotals of the same key may leave either
// outcome; the flush, its only caller, runs before output resumes.
func (s *Store) DeleteTotalsFenced(ctx context.Context, ks []sink.TotalKey, tok sink.Token) (refused int, err error) {
	if len(ks) == 0 {
		return 0, nil
	}
	if err := sink.ValidFence(tok.Fence); err != nil {
		return 0, fmt.Errorf("valkey: delete totals: %w", err)
	}
	defer s.track(opDelete, time.Now())
	names := make([]string, len(ks))
	for i, k := range ks {
		var err error
		if names[i], err = s.k.total(k); err != nil {
			return 0, fmt.Errorf("valkey: delete totals: key %d (ad %q): %w", i, k.Ad, err)
		}
	}
	// One script call per key: keys of different ads live in different
	// cluster slots.
	gen, fence := strconv.FormatInt(tok.Gen, 10), strconv.FormatInt(tok.Fence, 10)
	deleted := make([]string, 0, len(names))
	for chunk := range chunks(names, s.opts.BatchSize) {
		execs := make([]valkey.LuaExec, len(chunk))
		for i, n := range chunk {
			execs[i] = valkey.LuaExec{Keys: []string{n}, Args: []string{gen, fence}}
		}
		done, err := s.eval(ctx, opDelete, delTotal, execs)
		if err != nil {
			return refused, fmt.Errorf("valkey: delete totals: %w", err)
		}
		for i, ok := range done {
			if ok {
				deleted = append(deleted, chunk[i])
			} else {
				refused++
			}
		}
	}
	s.m.deleted.Add(float64(len(deleted)))
	s.m.refused.WithLabelValues(opDelete).Add(float64(refused))
	if len(deleted) == 0 {
		return refused, nil
	}
	epochs, err := s.registered(ctx, opDelete, "-inf", "+inf")
	if err != nil {
		return refused, fmt.Errorf("valkey: delete totals: %w", err)
	}
	var cmds valkey.Commands
	for _, e := range epochs {
		for chunk := range chunks(deleted, s.opts.BatchSize) {
			cmds = append(cmds, s.c.B().Srem().Key(s.k.epoch(e)).Member(chunk...).Build())
		}
	}
	if err := s.roundTrips(ctx, opDelete, cmds); err != nil {
		return refused, fmt.Errorf("valkey: delete totals: forget: %w", err)
	}
	return refused, nil
}

// ForgetEpochs deletes the epoch sets of the epochs in [from, to) and then
// their registry entries. The totals stay.
func (s *Store) ForgetEpochs(ctx context.Context, from, to int64) error {
	if from >= to {
		return nil
	}
	defer s.track(opForget, time.Now())
	// Scores are float64: rounding is monotonic, so the score range holds
	// every epoch in [from, to); the exact bounds are applied below.
	cand, err := s.registered(ctx, opForget, strconv.FormatFloat(float64(from), 'g', -1, 64), strconv.FormatFloat(float64(to), 'g', -1, 64))
	if err != nil {
		return fmt.Errorf("valkey: forget epochs: %w", err)
	}
	var members []string
	for _, e := range cand {
		if e >= from && e < to {
			members = append(members, strconv.FormatInt(e, 10))
		}
	}
	for chunk := range chunks(members, s.opts.BatchSize) {
		cmds := make(valkey.Commands, 0, len(chunk)+1)
		for _, m := range chunk {
			e, _ := strconv.ParseInt(m, 10, 64) // formatted above
			cmds = append(cmds, s.c.B().Del().Key(s.k.epoch(e)).Build())
		}
		cmds = append(cmds, s.c.B().Zrem().Key(s.k.epochs()).Member(chunk...).Build())
		if _, err := s.roundTrip(ctx, opForget, cmds); err != nil {
			return fmt.Errorf("valkey: forget epochs: %w", err)
		}
	}
	return nil
}

// registered returns the epochs in the registry with scores in [min, max]
// (Valkey score syntax), ascending.
func (s *Store) registered(ctx context.Context, op, min, max string) ([]int64, error) {
	res, err := s.roundTrip(ctx, op, valkey.Commands{s.c.B().Zrange().Key(s.k.epochs()).Min(min).Max(max).Byscore().Build()})
	if err != nil {
		return nil, fmt.Errorf("read epoch registry: %w", err)
	}
	ms, err := res[0].AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("read epoch registry: %w", err)
	}
	out := make([]int64, 0, len(ms))
	for _, m := range ms {
		e, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("epoch registry member %q: %w", m, err)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// roundTrip sends cmds in one pipeline, bounded by Options.Timeout, and
// returns the first error among the replies. It keeps adclick_valkey_up and
// adclick_valkey_errors_total (see note).
//
// A connection that predates a restart of the server fails at its next use
// with a transport error (EOF, reset, broken pipe; see staleConn) and is
// then replaced by the client. roundTrip sends the pipeline again after such
// a failure, up to once per pooled connection (maxStaleConns), so that a
// call right after a restart does not fail on a stale connection. Such a
// failure comes at once (the connection is closed already); a timeout, a
// refused dial or a reply error is returned without a retry, so during an
// outage a call still fails within about Timeout + DialTimeout per round
// trip.
//
// Sending a pipeline again is safe for every command the store sends:
// reads, the scripts' conditional absolute HSETs and DELs, SADD/SREM/ZADD/
// ZREM of members, PEXPIRE and the marker's SETs give the same result when
// applied twice. It cannot
// reorder one caller's writes either: the retry happens before the call
// returns, and concurrent calls on the same key have no order to keep.
func (s *Store) roundTrip(ctx context.Context, op string, cmds valkey.Commands) ([]valkey.ValkeyResult, error) {
	return s.roundTripKeep(ctx, op, cmds, nil)
}

// roundTripKeep is roundTrip, except that a reply error for which keep
// returns true is left in its result for the caller instead of failing
// the round trip.
func (s *Store) roundTripKeep(ctx context.Context, op string, cmds valkey.Commands, keep func(error) bool) ([]valkey.ValkeyResult, error) {
	for retry := 0; ; retry++ {
		res, err := s.send(ctx, cmds, keep)
		if err != nil && retry < maxStaleConns && ctx.Err() == nil && staleConn(err) {
			// Not counted as an error, and the server is not marked down:
			// the pipeline goes again at once on another connection.
			s.m.staleRetries.WithLabelValues(op).Inc()
			continue
		}
		s.note(ctx, op, err)
		return res, err
	}
}

// send sends cmds in one pipeline, bounded by Options.Timeout, and returns
// the first error among the replies (a nil reply is not an error, nor one
// that keep, if not nil, keeps).
func (s *Store) send(ctx context.Context, cmds valkey.Commands, keep func(error) bool) ([]valkey.ValkeyResult, error) {
	rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	res := s.c.DoMulti(rctx, cmds...)
	for _, r := range res {
		if e := r.Error(); e != nil && !valkey.IsValkeyNil(e) && (keep == nil || !keep(e)) {
			return nil, e
		}
	}
	return res, nil
}

// note records the outcome of a round trip: a reply error from the server
// (a *valkey.ValkeyError) shows the server is up; any other failure, unless
// the caller's own context ended, marks it down.
func (s *Store) note(ctx context.Context, op string, err error) {
	if err == nil {
		s.m.up.Set(1)
		return
	}
	s.m.errors.WithLabelValues(op).Inc()
	var ve *valkey.ValkeyError
	switch {
	case errors.As(err, &ve):
		s.m.up.Set(1)
	case ctx.Err() != nil:
		// The caller gave up; that says nothing about the server.
	default:
		s.m.up.Set(0)
	}
}

// maxStaleConns bounds the pipelined connections valkey-go keeps to one
// server: 2^PipelineMultiplex, and the store leaves PipelineMultiplex at its
// default, which is at most 2 (see valkey.ClientOption). After a restart of
// the server each of them fails once, at its next use, before the client
// replaces it; which one a command uses is chosen at random, so one retry
// is not enough when there are four.
const maxStaleConns = 4

// staleConn reports whether err is the failure of a connection the server
// closed (a restart, an idle timeout, a proxy that dropped it), which the
// client replaces at its next use: end of file, a reset, a broken pipe, or
// a connection already closed. Timeouts are not: the server may be alive
// but unresponsive, and waiting again would double the time a caller
// waits. Neither is the client being closed (valkey.ErrClosing).
func staleConn(err error) bool {
	if errors.Is(err, valkey.ErrClosing) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, net.ErrClosed)
}

// setsPerRoundTrip bounds the number of commands carrying up to BatchSize
// members each (SADD, SREM) sent in one round trip.
const setsPerRoundTrip = 16

// roundTrips sends cmds in order, setsPerRoundTrip per round trip, and stops
// at the first error.
func (s *Store) roundTrips(ctx context.Context, op string, cmds valkey.Commands) error {
	for group := range chunks(cmds, setsPerRoundTrip) {
		if _, err := s.roundTrip(ctx, op, group); err != nil {
			return err
		}
	}
	return nil
}

// track records a call's duration.
func (s *Store) track(op string, start time.Time) {
	s.m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// chunks yields consecutive slices of at most n elements of xs.
func chunks[T any](xs []T, n int) func(yield func([]T) bool) {
	return func(yield func([]T) bool) {
		for lo := 0; lo < len(xs); lo += n {
			if !yield(xs[lo:min(lo+n, len(xs))]) {
				return
			}
		}
	}
}
