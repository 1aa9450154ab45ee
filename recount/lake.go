package recount

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/adclick/adclick/latepath"
)

// Row is one row of the lake: a latepath.Record with its event hour and
// checkpoint epoch. Its struct tags are the Parquet schema (see SchemaDoc);
// column names are stable: external tables depend on them. The Writer does
// not write Rows: its encoder (lake_encode.go) writes the same columns from
// its own buffers, and a test checks that it writes what parquet-go writes
// for Rows, so the two change together.
type Row struct {
	Verdict      string `parquet:"verdict,dict"`     // counted, late, duplicate, beyond_horizon or invalid:<reason>
	ClickID      string `parquet:"click_id"`         // as decoded ("" if absent)
	AdID         string `parquet:"ad_id,dict"`       //
	CampaignID   string `parquet:"campaign_id,dict"` //
	DeviceID     string `parquet:"device_id"`        //
	ImpressionMs int64  `parquet:"impression_ms"`    // Unix ms
	DeviceMs     int64  `parquet:"device_ms"`        // raw device time, Unix ms
	EventMs      int64  `parquet:"event_ms"`         // clamped event time, Unix ms (0 for an invalid click)
	ArrivalMs    int64  `parquet:"arrival_ms"`       // Unix ms
	SpendMicros  int64  `parquet:"spend_micros"`     // millionths of the currency unit
	Shard        string `parquet:"shard,dict"`       // source shard
	Seq          string `parquet:"seq"`              // source position ("" when the source has none)
	Raw          []byte `parquet:"raw"`              // payload of an invalid record as read, at most latepath.MaxRaw bytes (bytes, not UTF-8 text)
	EventHourMs  int64  `parquet:"event_hour_ms"`    // the partition's hour start, Unix ms
	Epoch        int64  `parquet:"epoch"`            // checkpoint epoch of the record
}

// SchemaDoc documents the lake's Parquet schema, one column a line.
const SchemaDoc = `verdict        BYTE_ARRAY (STRING, dictionary)  counted | late | duplicate | beyond_horizon | guard_expired | invalid:<reason>
click_id       BYTE_ARRAY (STRING)
ad_id          BYTE_ARRAY (STRING, dictionary)
campaign_id    BYTE_ARRAY (STRING, dictionary)
device_id      BYTE_ARRAY (STRING)
impression_ms  INT64   Unix ms
device_ms      INT64   Unix ms, the raw device time
event_ms       INT64   Unix ms, clamp(device, impression, arrival); 0 when invalid
arrival_ms     INT64   Unix ms
spend_micros   INT64
shard          BYTE_ARRAY (STRING, dictionary)
seq            BYTE_ARRAY (STRING)  source position, "" if none
raw            BYTE_ARRAY           payload of an invalid record as read (bytes: it need not be UTF-8), at most 1,024 bytes; else empty
event_hour_ms  INT64   Unix ms, start of the partition's hour
epoch          INT64   checkpoint epoch
All columns are required (not null). Partitions: hour=YYYY-MM-DDTHH (UTC).`

// Record returns the row as a latepath.Record.
func (r *Row) Record() latepath.Record {
	return latepath.Record{Verdict: r.Verdict, ClickID: r.ClickID, AdID: r.AdID, CampaignID: r.CampaignID, DeviceID: r.DeviceID,
		ImpressionMs: r.ImpressionMs, DeviceMs: r.DeviceMs, EventMs: r.EventMs, ArrivalMs: r.ArrivalMs,
		SpendMicros: r.SpendMicros, Shard: r.Shard, Seq: r.Seq, Raw: string(r.Raw)}
}

// maxHourMs is the start of the last hour of year 9999, the last a
// partition name can spell.
const maxHourMs = 253_402_297_200_000

// PartitionHour returns the start (Unix ms) of the hour partition of r: its
// event hour when it has an event time (a click judged by the stream), its
// arrival hour otherwise (an invalid click), and 0 when neither is in
// (0, year 9999].
func PartitionHour(r *latepath.Record) int64 {
	t := r.EventMs
	if t <= 0 || strings.HasPrefix(r.Verdict, latepath.InvalidPrefix) {
		t = r.ArrivalMs
	}
	if t <= 0 || t > maxHourMs {
		return 0
	}
	return t - t%eventtime.HourMs
}

// HourPrefix returns the key prefix of the hour starting at hourMs,
// "hour=2026-11-29T10/".
func HourPrefix(hourMs int64) string {
	return "hour=" + time.UnixMilli(hourMs).UTC().Format("2006-01-02T15") + "/"
}

// ParseHour parses "2026-11-29T10", "2026-11-29T10Z" or an hour bucket
// "H2026-11-29T10Z" into the hour's start, Unix ms.
func ParseHour(s string) (int64, error) {
	v := strings.TrimSuffix(strings.TrimPrefix(s, "H"), "Z")
	t, err := time.Parse("2006-01-02T15", v)
	if err != nil {
		return 0, fmt.Errorf("recount: bad hour %q: want like 2026-11-29T10Z", s)
	}
	return t.UnixMilli(), nil
}

// FormatHour returns the hour starting at hourMs as "2026-11-29T10Z".
func FormatHour(hourMs int64) string {
	return time.UnixMilli(hourMs).UTC().Format("2006-01-02T15Z")
}

// ObjectKey returns the key of the object of (hour, part, epoch).
func ObjectKey(hourMs int64, part string, epoch int64) string {
	return HourPrefix(hourMs) + "part-" + part + "-e" + epochString(epoch) + ".parquet"
}

const manifestRoot = "_epochs/"

func epochString(epoch int64) string { return fmt.Sprintf("%012d", epoch) }

// manifestDir returns the folder of scope's manifests: _epochs/ for the
// unscoped writers of a job owning every key group, _epochs/<scope>/ for a
// range's.
func manifestDir(scope string) string {
	if scope == "" {
		return manifestRoot
	}
	return manifestRoot + scope + "/"
}

func manifestKey(scope string, epoch int64, part string) string {
	return manifestDir(scope) + "e" + epochString(epoch) + "/" + part
}

// validPart reports whether part is a usable writer name.
func validPart(part string) error {
	if part == "" || len(part) > 64 {
		return fmt.Errorf("recount: bad part name %q", part)
	}
	for i := 0; i < len(part); i++ {
		c := part[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("recount: bad part name %q", part)
		}
	}
	return nil
}

// Writer writes one runtime writer's part of the lake. Add buffers in
// memory; Flush writes the buffered records as one object per hour. It is
// not safe for concurrent use: each runtime writer (pre-aggregator subtask,
// source) owns one.
type Writer struct {
	store Store
	scope string
	part  string // in object names: <scope>-<part> for a scoped writer
	// hours holds the buffered rows by partition hour, each hour's column
	// by column in order of Add (so a chunk needs no split by hour); last
	// is the hour of the last Add. free holds the emptied hour buffers for
	// the next chunks, largest last, at most about two chunks' worth of
	// rows in all, whatever the mix of hours.
	hours    []*hourRows
	last     *hourRows
	free     []*hourRows
	buffered int
	enc      encoder
	written  int64
	bytes    int64

	// SpillRows is the number of buffered records at which Spill writes
	// them; default DefaultSpillRows.
	SpillRows int
	// The epoch being written in chunks, its next chunk number, and the
	// keys its chunks wrote so far (its manifest lists them all).
	chunkEpoch int64
	chunk      int
	epochKeys  []string
}

// DefaultSpillRows bounds a writer's buffer: past it, Spill writes the
// records out (a chunk), so memory does not grow with the checkpoint
// interval.
const DefaultSpillRows = 1 << 18

// chunkKey returns the key of chunk k of (hour, part, epoch): chunk 0 is
// ObjectKey; later chunks are part-<part>-c<k>-e<epoch>.parquet.
func chunkKey(hourMs int64, part string, epoch int64, k int) string {
	if k == 0 {
		return ObjectKey(hourMs, part, epoch)
	}
	return HourPrefix(hourMs) + "part-" + part + "-c" + strconv.Itoa(k) + "-e" + epochString(epoch) + ".parquet"
}

// NewWriter returns a writer of part (letters, digits, '-', '_'; for
// example "preagg-3" or "source", but not "kg<a>-<b>…" nor "f<n>-…", which
// would read as a scope or a fence) to store.
func NewWriter(store Store, part string) (*Writer, error) {
	return NewFencedWriter(store, "", 0, part)
}

// NewScopedWriter returns a writer of part for a range pipeline whose
// epochs are its own (scope names the range, like "kg0-16"; "" is
// NewWriter): its objects are named part-<scope>-<part>-e<epoch> and its
// manifests live under _epochs/<scope>/, so that RemoveEpochsIn of one
// range never touches another's objects, though their epoch numbers
// overlap.
func NewScopedWriter(store Store, scope, part string) (*Writer, error) {
	return NewFencedWriter(store, scope, 0, part)
}

// NewFencedWriter is NewScopedWriter for a pipeline held under a lease
// tenure with fence f (0: none, NewScopedWriter): with f > 0 its objects
// are named part-<scope>-f<f>-<part>-e<epoch> (part-f<f>-<part>-e<epoch>
// for scope ""), so that no two tenures of a range ever write the same
// object, and the readers read an epoch's objects only from the fence that
// holds it (see OpenFence, which the tenure calls before its first
// object). A scope other than "" is "kg<from>-<to>".
func NewFencedWriter(store Store, scope string, f int64, part string) (*Writer, error) {
	if err := validPart(part); err != nil {
		return nil, err
	}
	if ambiguousPart(part) {
		return nil, fmt.Errorf("recount: bad part name %q: it reads as a scope or a fence", part)
	}
	if f < 0 {
		return nil, fmt.Errorf("recount: bad fence %d", f)
	}
	name := part
	if f > 0 {
		name = "f" + strconv.FormatInt(f, 10) + "-" + name
	}
	if scope != "" {
		if err := validPart(scope); err != nil {
			return nil, fmt.Errorf("recount: bad scope %q", scope)
		}
		if sc, n := scopePrefix(scope + "-"); n == 0 || sc != scope {
			return nil, fmt.Errorf("recount: bad scope %q: want like kg0-16", scope)
		}
		name = scope + "-" + name
	}
	if err := validPart(name); err != nil {
		return nil, err
	}
	return &Writer{store: store, scope: scope, part: name}, nil
}

// Add buffers r (the bytes of its strings are copied: the writer keeps no
// reference to r). The epoch is given at Flush.
func (w *Writer) Add(r *latepath.Record) {
	h := PartitionHour(r)
	b := w.last
	if b == nil || b.hour != h {
		b = w.hourRows(h)
		w.last = b
	}
	b.add(r)
	w.buffered++
}

// hourRows returns the buffer of hour h, taking an empty one for a new
// hour: the one that held h in an earlier chunk if it is free, else the
// largest free one.
func (w *Writer) hourRows(h int64) *hourRows {
	for _, b := range w.hours {
		if b.hour == h {
			return b
		}
	}
	var b *hourRows
	if n := len(w.free); n > 0 {
		k := n - 1
		for i, f := range w.free {
			if f.hour == h {
				k = i
			}
		}
		b = w.free[k]
		copy(w.free[k:], w.free[k+1:])
		w.free[n-1] = nil
		w.free = w.free[:n-1]
	} else {
		b = &hourRows{}
	}
	b.hour = h
	w.hours = append(w.hours, b)
	return b
}

// release empties the hour buffers and keeps them for the next chunks: the
// largest ones, as long as they hold at most two chunks' worth of rows
// (and always the largest one), except buffers grown by unusually long
// strings.
func (w *Writer) release() {
	for _, b := range w.hours {
		b.reset()
		w.free = append(w.free, b)
	}
	clear(w.hours)
	w.hours = w.hours[:0]
	w.last = nil
	// Buffers grown by unusually long strings (a burst of invalid clicks
	// with their raw payloads) are not kept: memory follows the rows, not
	// the largest chunk ever seen.
	w.free = slices.DeleteFunc(w.free, func(b *hourRows) bool { return b.capBytes() > keptBytesPerRow*w.spillRows() })
	slices.SortFunc(w.free, func(a, b *hourRows) int { return cmp.Compare(a.capRows(), b.capRows()) })
	total := 0
	for _, b := range w.free {
		total += b.capRows()
	}
	drop := 0
	for drop < len(w.free)-1 && total > 2*w.spillRows() {
		total -= w.free[drop].capRows()
		drop++
	}
	n := copy(w.free, w.free[drop:])
	clear(w.free[n:])
	w.free = w.free[:n]
}

// bufferCap returns how many rows the writer's buffers hold without
// growing, in use and free.
func (w *Writer) bufferCap() int {
	c := 0
	for _, b := range w.hours {
		c += b.capRows()
	}
	for _, b := range w.free {
		c += b.capRows()
	}
	return c
}

// Buffered returns the number of records added since the last Flush.
func (w *Writer) Buffered() int { return w.buffered }

// Written returns the rows and bytes written by Flush so far.
func (w *Writer) Written() (rows, bytes int64) { return w.written, w.bytes }

// Spill writes the buffered records, all of checkpoint epoch epoch, if
// there are at least SpillRows of them, as one more chunk of that epoch.
// The runtime calls it between records; Flush at the barrier writes the
// rest. Like Flush, it writes the epoch's manifest (every key of the epoch
// so far) before the objects.
func (w *Writer) Spill(ctx context.Context, epoch int64) error {
	if w.buffered < w.spillRows() {
		return nil
	}
	return w.writeChunk(ctx, epoch)
}

// Flush writes the buffered records, all of checkpoint epoch epoch (the
// id of the last barrier passed before them, or the restored checkpoint id),
// as one object per hour (per chunk, see Spill), and forgets them. It first
// writes the epoch's manifest (see RemoveEpochs). The runtime calls it at
// each barrier before acknowledging it; when it returns nil the objects are
// durable, and the next records belong to another epoch. With nothing
// buffered it writes nothing. On error the records stay buffered.
func (w *Writer) Flush(ctx context.Context, epoch int64) error {
	err := w.writeChunk(ctx, epoch)
	if err == nil {
		w.chunk, w.epochKeys = 0, w.epochKeys[:0]
	}
	return err
}

func (w *Writer) writeChunk(ctx context.Context, epoch int64) error {
	if w.buffered == 0 {
		return nil
	}
	if w.chunk > 0 && w.chunkEpoch != epoch {
		// An epoch's chunks are always closed by Flush; start afresh if the
		// caller moved on without one.
		w.chunk, w.epochKeys = 0, w.epochKeys[:0]
	}
	w.chunkEpoch = epoch
	slices.SortFunc(w.hours, func(a, b *hourRows) int { return cmp.Compare(a.hour, b.hour) })
	keys := len(w.epochKeys)
	for _, h := range w.hours {
		w.epochKeys = append(w.epochKeys, chunkKey(h.hour, w.part, epoch, w.chunk))
	}
	var man strings.Builder
	for _, k := range w.epochKeys {
		man.WriteString(k)
		man.WriteByte('\n')
	}
	if err := w.store.Put(ctx, manifestKey(w.scope, epoch, w.part), []byte(man.String())); err != nil {
		w.epochKeys = w.epochKeys[:keys]
		return fmt.Errorf("recount: flush epoch %d: %w", epoch, err)
	}
	for i, h := range w.hours {
		data, err := w.enc.encode(h, epoch)
		if err != nil {
			err = fmt.Errorf("encode: %w", err)
		} else {
			err = w.store.Put(ctx, w.epochKeys[keys+i], data)
		}
		if err != nil {
			// The rows stay buffered; a retry lists this chunk's keys again
			// (the manifest already written lists them: a restore removes
			// what exists of them).
			w.epochKeys = w.epochKeys[:keys]
			return fmt.Errorf("recount: flush epoch %d: %w", epoch, err)
		}
		w.written += int64(h.n)
		w.bytes += int64(len(data))
	}
	w.chunk++
	// Forget the rows; keep the buffers.
	w.release()
	w.buffered = 0
	return nil
}

// keptBytesPerRow bounds the string bytes of a free buffer kept for the
// next chunk, per row of a chunk (SpillRows): about twice what the
// benchmark trace's rows hold.
const keptBytesPerRow = 128

func (w *Writer) spillRows() int {
	if w.SpillRows > 0 {
		return w.SpillRows
	}
	return DefaultSpillRows
}

// RemoveEpochs removes every lake object of epochs ≥ from, as listed by the
// epochs' manifests, then the manifests. The flush after a restore from
// checkpoint c calls it with from = c before any new output. It is
// idempotent: a second call after a failure finishes the work. It returns
// the number of object keys deleted: those the manifests list, including any
// a writer that died half-way never wrote.
func RemoveEpochs(ctx context.Context, store Store, from int64) (int, error) {
	return RemoveEpochsIn(ctx, store, "", from)
}

// RemoveEpochsIn is RemoveEpochs for the writers of scope (NewScopedWriter):
// it removes what their manifests of epochs ≥ from list, and nothing any
// other scope wrote.
func RemoveEpochsIn(ctx context.Context, store Store, scope string, from int64) (int, error) {
	return RemoveEpochsBetween(ctx, store, scope, from, math.MaxInt64)
}

// RemoveEpochsBetween is RemoveEpochsIn for the epochs in [from, to] only:
// a fence sweep removes a predecessor's epochs and keeps the holder's own,
// which are all above them.
func RemoveEpochsBetween(ctx context.Context, store Store, scope string, from, to int64) (int, error) {
	dir := manifestDir(scope)
	start := ""
	if from > 0 {
		start = dir + "e" + epochString(from-1) + "/~"
	}
	var mans []string
	err := store.List(ctx, dir+"e", start, func(key string) error {
		e, ok := manifestEpoch(dir, key)
		if ok && e >= from && e <= to {
			mans = append(mans, key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("recount: remove epochs ≥ %d: %w", from, err)
	}
	n := 0
	for _, m := range mans {
		b, err := store.Get(ctx, m)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("recount: remove epochs ≥ %d: %w", from, err)
		}
		for _, k := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if k == "" || !strings.HasPrefix(k, "hour=") {
				continue
			}
			if err := store.Delete(ctx, k); err != nil {
				return n, fmt.Errorf("recount: remove epochs ≥ %d: %w", from, err)
			}
			n++
		}
		if err := store.Delete(ctx, m); err != nil {
			return n, fmt.Errorf("recount: remove epochs ≥ %d: %w", from, err)
		}
	}
	return n, nil
}

// manifestEpoch parses the epoch of "<dir>e<epoch>/<part>".
func manifestEpoch(dir, key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, dir+"e")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseInt(num, 10, 64)
	return e, err == nil
}

// ReadHour calls fn for every row of the hour starting at hourMs, object by
// object in key order, of the objects of the fence that holds each epoch
// (an old tenure's object at an epoch a later tenure restored and wrote
// again is not read; see OpenFence). The row passed to fn is reused: copy what is kept
// (its strings are safe to keep).
func ReadHour(ctx context.Context, store Store, hourMs int64, fn func(*Row) error) error {
	keys, err := hourKeys(ctx, store, newFences(store), hourMs)
	if err != nil {
		return err
	}
	rows := make([]Row, 1024)
	for _, k := range keys {
		b, err := store.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return fmt.Errorf("recount: read hour %s: %w", FormatHour(hourMs), err)
		}
		if err := readObject(b, rows, fn); err != nil {
			return fmt.Errorf("recount: read %s: %w", k, err)
		}
	}
	return nil
}

func readObject(b []byte, rows []Row, fn func(*Row) error) error {
	return readObjectBatches(b, rows, func(rs []Row) error {
		for i := range rs {
			if err := fn(&rs[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// readObjectBatches reads the object b with the generic row reader into
// rows, calling fn with each filled prefix.
func readObjectBatches(b []byte, rows []Row, fn func([]Row) error) error {
	// Opened first: the generic reader panics on an object it cannot open
	// (a damaged or truncated one), which must be an error instead.
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return fmt.Errorf("not a readable Parquet object: %w", err)
	}
	r := parquet.NewGenericReader[Row](f)
	defer r.Close()
	for {
		n, err := r.Read(rows)
		if n > 0 {
			if ferr := fn(rows[:n]); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// Hours calls fn with the start of every hour partition in store from
// fromMs on, ascending. It costs one listing request per hour.
func Hours(ctx context.Context, store Store, fromMs int64, fn func(hourMs int64) error) error {
	start := ""
	if fromMs > 0 {
		start = HourPrefix(fromMs)[:len(HourPrefix(fromMs))-1] // "hour=…T10": every key of that hour sorts after it
	}
	for {
		var key string
		err := store.List(ctx, "hour=", start, func(k string) error {
			key = k
			return ErrStopList
		})
		if err != nil {
			return fmt.Errorf("recount: list hours: %w", err)
		}
		if key == "" {
			return nil
		}
		dir := key[:strings.IndexByte(key, '/')+1]
		h, err := ParseHour(strings.TrimSuffix(strings.TrimPrefix(dir, "hour="), "/"))
		if err != nil {
			return err
		}
		if err := fn(h); err != nil {
			if errors.Is(err, ErrStopList) {
				return nil
			}
			return err
		}
		start = dir + "~"
	}
}
