package sink

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends the item as one JSON object with the attribute names of
// the ad_metrics table (DESIGN.md §5), in a fixed order; attributes the item
// does not carry are left out. The same item always gives the same bytes.
// Strings are escaped as encoding/json escapes them (they used to be quoted
// in Go syntax, \a and \x00, which is not JSON).
func (it *Item) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"entity":`...)
	dst = appendString(dst, it.Entity)
	dst = append(dst, `,"bucket":`...)
	dst = appendString(dst, it.Bucket)
	if it.HasJobGen {
		dst = appendInt(dst, "job_gen", it.JobGen)
	}
	if it.Fence != 0 {
		dst = appendInt(dst, "wf", it.Fence)
	}
	for _, w := range []Writer{Fast, Late} {
		t := it.Attrs(w)
		if !t.Present {
			continue
		}
		p := w.String()
		dst = appendInt(dst, p+"_valid", t.Valid)
		dst = appendInt(dst, p+"_spend_micros", t.SpendMicros)
		dst = appendInt(dst, p+"_ckpt", t.Ckpt)
		dst = append(dst, `,"`+p+`_ix":`...)
		dst = appendString(dst, t.Ix)
		dst = appendInt(dst, p+"_gen", t.Gen)
	}
	if it.Final.Present {
		dst = appendInt(dst, "final_valid", it.Final.Valid)
		dst = appendInt(dst, "final_spend_micros", it.Final.SpendMicros)
		dst = appendInt(dst, "final_gen", it.Final.Gen)
		dst = appendInt(dst, "final_at", it.Final.AtMs)
	}
	return append(dst, '}')
}

func appendInt(dst []byte, name string, v int64) []byte {
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":`...)
	return strconv.AppendInt(dst, v, 10)
}

// appendString appends s as a JSON string, byte for byte as
// encoding/json writes it with HTML escaping off: '"' and '\\' escaped,
// control characters as \b \f \n \r \t or \u00XX, U+2028 and U+2029 as
// \u2028 and \u2029 (for JavaScript), every byte that is not part of valid
// UTF-8 as \ufffd, everything else as itself. The replacement is lossy on
// purpose: JSON cannot carry bytes that are not UTF-8, and ingest never
// accepts such an id (bad_utf8:ad_id), so only a store written by something
// else can hold one.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
