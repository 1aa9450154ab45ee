package kpl_test

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"pgregory.net/rapid"

	"github.com/adclick/adclick/ingest/kpl"
)

// The reference: the messages described with a hand-written descriptor and
// decoded by the protobuf library's own (reflection-based) decoder, which
// shares no code path with kpl's protowire walk.
var aggDesc, recDesc, tagDesc protoreflect.MessageDescriptor

func init() {
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	req := descriptorpb.FieldDescriptorProto_LABEL_REQUIRED.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	byt := descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
	u64 := descriptorpb.FieldDescriptorProto_TYPE_UINT64.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	field := func(name string, num int32, l *descriptorpb.FieldDescriptorProto_Label, t *descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: l, Type: t}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("kpl_test_messages.proto"),
		Package: proto.String("kpltest"),
		Syntax:  proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("AggregatedRecord"), Field: []*descriptorpb.FieldDescriptorProto{
				field("partition_key_table", 1, rep, str, ""),
				field("explicit_hash_key_table", 2, rep, str, ""),
				field("records", 3, rep, msg, ".kpltest.Record"),
			}},
			{Name: proto.String("Record"), Field: []*descriptorpb.FieldDescriptorProto{
				field("partition_key_index", 1, req, u64, ""),
				field("explicit_hash_key_index", 2, opt, u64, ""),
				field("data", 3, req, byt, ""),
				field("tags", 4, rep, msg, ".kpltest.Tag"),
			}},
			{Name: proto.String("Tag"), Field: []*descriptorpb.FieldDescriptorProto{
				field("key", 1, req, str, ""),
				field("value", 2, opt, str, ""),
			}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		panic(err)
	}
	aggDesc = f.Messages().ByName("AggregatedRecord")
	recDesc = f.Messages().ByName("Record")
	tagDesc = f.Messages().ByName("Tag")
}

type userRecord struct {
	Key  string
	Data string
}

// refDecode decodes an aggregated record with the reference decoder.
func refDecode(b []byte) ([]userRecord, string) {
	if !kpl.IsAggregated(b) {
		return nil, kpl.ReasonBadBody
	}
	body := b[4 : len(b)-16]
	sum := md5.Sum(body)
	if !bytes.Equal(sum[:], b[len(b)-16:]) {
		return nil, kpl.ReasonBadChecksum
	}
	m := dynamicpb.NewMessage(aggDesc)
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, kpl.ReasonBadBody
	}
	keys := m.Get(aggDesc.Fields().ByNumber(1)).List()
	hashes := m.Get(aggDesc.Fields().ByNumber(2)).List()
	recs := m.Get(aggDesc.Fields().ByNumber(3)).List()
	var out []userRecord
	for i := 0; i < recs.Len(); i++ {
		r := recs.Get(i).Message()
		ki := r.Get(recDesc.Fields().ByNumber(1)).Uint()
		if ki >= uint64(keys.Len()) {
			return nil, kpl.ReasonBadBody
		}
		if hf := recDesc.Fields().ByNumber(2); r.Has(hf) && r.Get(hf).Uint() >= uint64(hashes.Len()) {
			return nil, kpl.ReasonBadBody
		}
		out = append(out, userRecord{keys.Get(int(ki)).String(), string(r.Get(recDesc.Fields().ByNumber(3)).Bytes())})
	}
	return out, ""
}

// refEncode builds an aggregated record with the reference library.
func refEncode(t testing.TB, keys, hashes []string, recs []refRec) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(aggDesc)
	kl := m.Mutable(aggDesc.Fields().ByNumber(1)).List()
	for _, k := range keys {
		kl.Append(protoreflect.ValueOfString(k))
	}
	hl := m.Mutable(aggDesc.Fields().ByNumber(2)).List()
	for _, h := range hashes {
		hl.Append(protoreflect.ValueOfString(h))
	}
	rl := m.Mutable(aggDesc.Fields().ByNumber(3)).List()
	for _, r := range recs {
		rm := dynamicpb.NewMessage(recDesc)
		rm.Set(recDesc.Fields().ByNumber(1), protoreflect.ValueOfUint64(r.key))
		if r.hash >= 0 {
			rm.Set(recDesc.Fields().ByNumber(2), protoreflect.ValueOfUint64(uint64(r.hash)))
		}
		rm.Set(recDesc.Fields().ByNumber(3), protoreflect.ValueOfBytes([]byte(r.data)))
		for _, tg := range r.tags {
			tm := dynamicpb.NewMessage(tagDesc)
			tm.Set(tagDesc.Fields().ByNumber(1), protoreflect.ValueOfString(tg))
			tm.Set(tagDesc.Fields().ByNumber(2), protoreflect.ValueOfString("v-"+tg))
			rm.Mutable(recDesc.Fields().ByNumber(4)).List().Append(protoreflect.ValueOfMessage(tm))
		}
		rl.Append(protoreflect.ValueOfMessage(rm))
	}
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("reference marshal: %v", err)
	}
	return wrap(body)
}

type refRec struct {
	key  uint64
	hash int // -1: none
	data string
	tags []string
}

func wrap(body []byte) []byte {
	sum := md5.Sum(body)
	out := append([]byte{0xF3, 0x89, 0x9A, 0xC2}, body...)
	return append(out, sum[:]...)
}

type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func deagg(t fataler, b []byte) ([]userRecord, error) {
	t.Helper()
	var out []userRecord
	n, err := kpl.Deaggregate(b, func(i int, key string, data []byte) error {
		if i != len(out) {
			t.Fatalf("sub-sequence: got %d, want %d", i, len(out))
		}
		out = append(out, userRecord{key, string(data)})
		return nil
	})
	if n != len(out) {
		t.Fatalf("n: got %d, want %d (calls)", n, len(out))
	}
	return out, err
}

// TestVectorProtowire decodes a record written field by field with
// protowire, in an unusual but valid order: records before the tables, an
// unknown field, tags, and an explicit hash key.
func TestVectorProtowire(t *testing.T) {
	rec := func(key uint64, hash int, data string, tags ...string) []byte {
		var b []byte
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, data)
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, key)
		if hash >= 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(hash))
		}
		for _, tg := range tags {
			var tb []byte
			tb = protowire.AppendTag(tb, 1, protowire.BytesType)
			tb = protowire.AppendString(tb, tg)
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendBytes(b, tb)
		}
		return b
	}
	var body []byte
	body = protowire.AppendTag(body, 3, protowire.BytesType)
	body = protowire.AppendBytes(body, rec(1, -1, `{"click_id":"a"}`))
	body = protowire.AppendTag(body, 1, protowire.BytesType)
	body = protowire.AppendString(body, "pk-zero")
	body = protowire.AppendTag(body, 99, protowire.VarintType) // unknown field
	body = protowire.AppendVarint(body, 12345)
	body = protowire.AppendTag(body, 1, protowire.BytesType)
	body = protowire.AppendString(body, "pk-one")
	body = protowire.AppendTag(body, 2, protowire.BytesType)
	body = protowire.AppendString(body, "170141183460469231731687303715884105728")
	body = protowire.AppendTag(body, 3, protowire.BytesType)
	body = protowire.AppendBytes(body, rec(0, 0, "", "env"))
	body = protowire.AppendTag(body, 3, protowire.BytesType)
	body = protowire.AppendBytes(body, rec(1, -1, "\x00\xff binary"))
	b := wrap(body)

	want := []userRecord{{"pk-one", `{"click_id":"a"}`}, {"pk-zero", ""}, {"pk-one", "\x00\xff binary"}}
	got, err := deagg(t, b)
	if err != nil {
		t.Fatalf("Deaggregate: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if ref, reason := refDecode(b); reason != "" || !slices.Equal(ref, want) {
		t.Fatalf("reference: got %q %q, want %q", ref, reason, want)
	}
}

// TestVectorReference decodes a record built by the protobuf library.
func TestVectorReference(t *testing.T) {
	b := refEncode(t, []string{"k0", "k1", "k2"}, []string{"0", "99"}, []refRec{
		{key: 2, hash: -1, data: "first"},
		{key: 0, hash: 1, data: "second", tags: []string{"a", "b"}},
		{key: 2, hash: 0, data: "third"},
	})
	got, err := deagg(t, b)
	if err != nil {
		t.Fatalf("Deaggregate: %v", err)
	}
	want := []userRecord{{"k2", "first"}, {"k0", "second"}, {"k2", "third"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestIsAggregated(t *testing.T) {
	magic := []byte{0xF3, 0x89, 0x9A, 0xC2}
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"empty", nil, false},
		{"json", []byte(`{"click_id":"c1","ad_id":"a","campaign_id":"x"}`), false},
		{"magic only", magic, false},
		{"magic and 15 bytes", append(slices.Clone(magic), make([]byte, 15)...), false},
		{"magic and 16 bytes", append(slices.Clone(magic), make([]byte, 16)...), true},
		{"wrong magic", append([]byte{0xF3, 0x89, 0x9A, 0xC3}, make([]byte, 30)...), false},
		{"aggregated", wrap(nil), true},
	} {
		if got := kpl.IsAggregated(tc.b); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBadRecords(t *testing.T) {
	good := refEncode(t, []string{"k"}, nil, []refRec{{key: 0, hash: -1, data: "x"}})
	flipped := slices.Clone(good)
	flipped[len(flipped)-1] ^= 1
	bodyFlip := slices.Clone(good)
	bodyFlip[6] ^= 0x40
	var recNoData, recNoKey, tagNoKey []byte
	recNoData = protowire.AppendTag(recNoData, 1, protowire.VarintType)
	recNoData = protowire.AppendVarint(recNoData, 0)
	recNoKey = protowire.AppendTag(recNoKey, 3, protowire.BytesType)
	recNoKey = protowire.AppendString(recNoKey, "d")
	tagNoKey = protowire.AppendTag(tagNoKey, 2, protowire.BytesType)
	tagNoKey = protowire.AppendString(tagNoKey, "v")
	withTable := func(rec []byte) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "k")
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		return protowire.AppendBytes(b, rec)
	}
	recWithTag := protowire.AppendBytes(protowire.AppendTag(slices.Clone(recNoKey), 4, protowire.BytesType), tagNoKey)
	recWithTag = protowire.AppendVarint(protowire.AppendTag(recWithTag, 1, protowire.VarintType), 0)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"not aggregated", []byte("plain"), kpl.ErrBadBody},
		{"digest flipped", flipped, kpl.ErrBadChecksum},
		{"body flipped", bodyFlip, kpl.ErrBadChecksum},
		{"truncated body", wrap(good[4 : len(good)-17]), kpl.ErrBadBody},
		{"data missing", wrap(withTable(recNoData)), kpl.ErrBadBody},
		{"key index missing", wrap(withTable(recNoKey)), kpl.ErrBadBody},
		{"tag key missing", wrap(withTable(recWithTag)), kpl.ErrBadBody},
		{"key index out of range", refEncode(t, []string{"k"}, nil, []refRec{{key: 1, hash: -1, data: "x"}}), kpl.ErrBadBody},
		{"hash index out of range", refEncode(t, []string{"k"}, []string{"1"}, []refRec{{key: 0, hash: 1, data: "x"}}), kpl.ErrBadBody},
		{"records but no key table", refEncode(t, nil, nil, []refRec{{key: 0, hash: -1, data: "x"}}), kpl.ErrBadBody},
		{"garbage body", wrap([]byte{0xff, 0xff, 0xff}), kpl.ErrBadBody},
	} {
		calls := 0
		n, err := kpl.Deaggregate(tc.b, func(int, string, []byte) error { calls++; return nil })
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got error %v, want %v", tc.name, err, tc.want)
			continue
		}
		var ke *kpl.Error
		if !errors.As(err, &ke) || kpl.Reason(err) != ke.Reason {
			t.Errorf("%s: error %v is not a *kpl.Error", tc.name, err)
		}
		if n != 0 || calls != 0 {
			t.Errorf("%s: got n=%d calls=%d, want 0 and 0", tc.name, n, calls)
		}
		if _, reason := refDecode(tc.b); reason != kpl.Reason(err) {
			t.Errorf("%s: reference reason %q, kpl reason %q", tc.name, reason, kpl.Reason(err))
		}
	}
	if got := kpl.Reason(fmt.Errorf("wrapped: %w", kpl.ErrBadChecksum)); got != "kpl_bad_checksum" {
		t.Errorf("Reason(wrapped): got %q, want kpl_bad_checksum", got)
	}
}

func TestEmptyAggregate(t *testing.T) {
	got, err := deagg(t, wrap(nil))
	if err != nil || len(got) != 0 {
		t.Fatalf("got %q, %v, want no records and no error", got, err)
	}
}

func TestCallbackErrorStops(t *testing.T) {
	b := refEncode(t, []string{"k"}, nil, []refRec{{0, -1, "a", nil}, {0, -1, "b", nil}, {0, -1, "c", nil}})
	stop := errors.New("stop")
	calls := 0
	n, err := kpl.Deaggregate(b, func(i int, _ string, _ []byte) error {
		calls++
		if i == 1 {
			return stop
		}
		return nil
	})
	if err != stop || n != 1 || calls != 2 {
		t.Fatalf("got n=%d calls=%d err=%v, want n=1 calls=2 err=stop", n, calls, err)
	}
}

// TestRoundTrip packs random user records and checks that de-aggregating
// every output gives them back in order, that every output fits the limit
// (or holds a single record), and that the reference decoder agrees.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxBytes := rapid.IntRange(64, 4096).Draw(t, "max")
		n := rapid.IntRange(0, 60).Draw(t, "n")
		keys := rapid.SliceOfN(rapid.StringN(1, 12, -1), 1, 5).Draw(t, "keys")
		var in []userRecord
		var hashes []string
		a := kpl.NewAggregator(maxBytes)
		var outs []*kpl.Aggregated
		for i := 0; i < n; i++ {
			k := rapid.SampledFrom(keys).Draw(t, "key")
			h := rapid.SampledFrom([]string{"", "0", "340282366920938463463374607431768211455"}).Draw(t, "hash")
			d := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data")
			in = append(in, userRecord{k, string(d)})
			hashes = append(hashes, h)
			full, err := a.Add(k, h, d)
			if err != nil {
				t.Fatalf("Add: %v", err)
			}
			if full != nil {
				outs = append(outs, full)
			}
		}
		if size := a.Size(); size > 0 && a.Len() > 1 && size > maxBytes {
			t.Fatalf("Size: got %d, want ≤ %d", size, maxBytes)
		}
		if last := a.Flush(); last != nil {
			outs = append(outs, last)
		}
		if a.Len() != 0 || a.Flush() != nil {
			t.Fatalf("aggregator not empty after Flush")
		}
		var got []userRecord
		for _, o := range outs {
			if len(o.Data) > maxBytes && o.Records > 1 {
				t.Fatalf("aggregated record of %d bytes holds %d records, limit %d", len(o.Data), o.Records, maxBytes)
			}
			first := len(got)
			recs, err := deagg(t, o.Data)
			if err != nil {
				t.Fatalf("Deaggregate: %v", err)
			}
			if len(recs) != o.Records {
				t.Fatalf("records: got %d, want %d", len(recs), o.Records)
			}
			ref, reason := refDecode(o.Data)
			if reason != "" || !slices.Equal(ref, recs) {
				t.Fatalf("reference: got %q %q, want %q", ref, reason, recs)
			}
			if o.PartitionKey != in[first].Key || o.ExplicitHashKey != hashes[first] {
				t.Fatalf("outer keys: got %q/%q, want %q/%q", o.PartitionKey, o.ExplicitHashKey, in[first].Key, hashes[first])
			}
			got = append(got, recs...)
		}
		if !slices.Equal(got, in) {
			t.Fatalf("got %d records %q, want %d %q", len(got), got, len(in), in)
		}
	})
}

func TestAggregatorLimits(t *testing.T) {
	a := kpl.NewAggregator(0)
	if _, err := a.Add("", "", []byte("x")); err == nil {
		t.Errorf("empty partition key: got nil error, want an error")
	}
	if _, err := a.Add("k", "", make([]byte, kpl.MaxRecordBytes)); err == nil {
		t.Errorf("record of MaxRecordBytes: got nil error, want an error")
	}
	// A record bigger than the limit but within MaxRecordBytes goes alone.
	big := make([]byte, kpl.DefaultMaxBytes+10)
	if full, err := a.Add("k", "", []byte("small")); err != nil || full != nil {
		t.Fatalf("small: got %v %v, want nil nil", full, err)
	}
	full, err := a.Add("k", "", big)
	if err != nil || full == nil || full.Records != 1 {
		t.Fatalf("big: got %+v %v, want the small record flushed", full, err)
	}
	last := a.Flush()
	if last == nil || last.Records != 1 || len(last.Data) <= kpl.DefaultMaxBytes {
		t.Fatalf("big alone: got %+v", last)
	}
}

func FuzzDeaggregate(f *testing.F) {
	f.Add(wrap(nil))
	f.Add([]byte("not aggregated"))
	a := kpl.NewAggregator(0)
	a.Add("k1", "", []byte(`{"click_id":"c1"}`))
	a.Add("k2", "42", []byte(`{"click_id":"c2"}`))
	f.Add(a.Flush().Data)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := deagg(t, b)
		want, reason := refDecode(b)
		if kpl.Reason(err) != reason {
			t.Fatalf("reason: got %q (%v), reference %q", kpl.Reason(err), err, reason)
		}
		if err == nil && !slices.Equal(got, want) {
			t.Fatalf("records: got %q, reference %q", got, want)
		}
		// Also fuzz the body behind a valid digest, which random input
		// rarely reaches.
		if len(b) > 0 && b[0]&1 == 1 {
			w := wrap(b[1:])
			got, err := deagg(t, w)
			want, reason := refDecode(w)
			if kpl.Reason(err) != reason {
				t.Fatalf("wrapped reason: got %q (%v), reference %q", kpl.Reason(err), err, reason)
			}
			if err == nil && !slices.Equal(got, want) {
				t.Fatalf("wrapped records: got %q, reference %q", got, want)
			}
		}
	})
}
