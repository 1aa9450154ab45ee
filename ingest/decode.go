package ingest

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of objects and arrays accepted, counting
// the click object itself as 1; the same limit as encoding/json, so that
// both agree on which inputs are malformed.
const maxDepth = 10000

// maxKnownKey is the length of the longest known field name.
const maxKnownKey = len("impression_ms")

// strPlain marks the bytes that stand for themselves inside a JSON string
// and need no check: printable ASCII except '"' and '\\'.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// strSkip marks the bytes a skipped string (a key or an unknown value) may
// hold without a closer look: strPlain plus every byte >= 0x80, because
// encoding/json accepts any bytes there.
var strSkip = func() (t [256]bool) {
	t = strPlain
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	return t
}()

// hexVal maps a hex digit to its value and every other byte to 0xff.
var hexVal = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
		t[c-'a'+'A'] = byte(c - 'a' + 10)
	}
	return t
}()

// SWAR constants: a byte of ones, and the high bit of every byte.
const (
	swarLo = 0x0101010101010101
	swarHi = 0x8080808080808080
)

// stopWord reports, for eight string bytes read as a little-endian word,
// whether any of them is '"', '\\' or a control character (< 0x20). The
// "any" answer of these bit tricks is exact.
func stopWord(x uint64) uint64 {
	q := x ^ (swarLo * '"')
	bs := x ^ (swarLo * '\\')
	return ((q-swarLo)&^q | (bs-swarLo)&^bs | (x-swarLo*0x20)&^x) & swarHi
}

// plainRun returns the index of the first byte at or after i that is not
// strPlain (printable ASCII other than '"' and '\\'), eight bytes at a time.
func plainRun(b []byte, i int) int {
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		if stopWord(x)|x&swarHi != 0 {
			break
		}
		i += 8
	}
	for i < len(b) && strPlain[b[i]] {
		i++
	}
	return i
}

// skipRun is plainRun for skipped strings, where bytes >= 0x80 pass too.
func skipRun(b []byte, i int) int {
	for i+8 <= len(b) {
		if stopWord(binary.LittleEndian.Uint64(b[i:])) != 0 {
			break
		}
		i += 8
	}
	for i < len(b) && strSkip[b[i]] {
		i++
	}
	return i
}

// span locates the last occurrence of a string field's value in the input.
type span struct {
	start, end int  // raw bytes between the quotes
	n          int  // decoded length in bytes; 0 = absent
	esc        bool // the raw bytes contain escapes
}

// Decode parses one JSON object into c, resetting c first. The object is a
// click (DESIGN.md §5); a file line also carries "shard" and "arrival_ms",
// which set c.Shard, c.ArrivalMs and c.HasArrival. Unknown fields are ignored,
// whatever their value; keys match exactly (case-sensitive), escapes in keys
// included; for a duplicated key the last occurrence wins, and null counts as
// absent. Numbers for the time and spend fields must be JSON integers that
// fit int64.
//
// It returns "" or the first problem found (see Reason for the list and the
// order). After malformed_json or not_object c is zero; after any other
// reason c holds the fields that decoded cleanly, for the exceptions log.
// Decode does not set EventMs: call Finish (or FinishLine) next.
//
// Decode never panics and allocates at most once per click (the ids share one
// string). It is safe for concurrent use on distinct Clicks.
func Decode(b []byte, c *Click) Reason {
	*c = Click{}
	i := skipWS(b, 0)
	if i >= len(b) {
		return ReasonMalformedJSON
	}
	if b[i] != '{' {
		end := skipValue(b, i, 0)
		if end < 0 || skipWS(b, end) != len(b) {
			return ReasonMalformedJSON
		}
		return ReasonNotObject
	}

	var (
		spans   [numStringFields]span
		present uint16 // bit f: int field f holds a value
		prob    Reason // first problem found while scanning
	)
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			// Key.
			if i >= len(b) || b[i] != '"' {
				return malformed(c)
			}
			ks := i + 1
			ke, kesc := skipString(b, ks)
			if ke < 0 {
				return malformed(c)
			}
			var f int
			if kesc {
				f = matchEscapedKey(b, ks)
			} else {
				f = matchKey(b[ks : ke-1])
			}
			i = skipWS(b, ke)
			if i >= len(b) || b[i] != ':' {
				return malformed(c)
			}
			i = skipWS(b, i+1)
			if i >= len(b) {
				return malformed(c)
			}

			// Value.
			switch {
			case f < 0:
				i = skipValue(b, i, 1)
			case f < numStringFields:
				if b[i] == '"' {
					end, n, esc, bad := scanString(b, i+1)
					if end < 0 {
						return malformed(c)
					}
					sp := span{start: i + 1, end: end - 1, n: n, esc: esc}
					switch {
					case bad:
						prob = first(prob, badUTF8Reasons[f])
						sp = span{}
					case n > MaxIDBytes:
						prob = first(prob, tooLongReasons[f])
						sp = span{}
					}
					spans[f] = sp
					i = end
				} else {
					null := b[i] == 'n'
					i = skipValue(b, i, 1)
					if !null {
						prob = first(prob, badTypeReasons[f])
					}
					spans[f] = span{}
				}
			default:
				var v int64
				if ch := b[i]; ch == '-' || ch >= '0' && ch <= '9' {
					var ok bool
					i, v, ok = scanNumber(b, i)
					if ok {
						present |= 1 << f
					} else {
						prob = first(prob, badTypeReasons[f])
						present &^= 1 << f
					}
				} else {
					null := b[i] == 'n'
					i = skipValue(b, i, 1)
					if !null {
						prob = first(prob, badTypeReasons[f])
					}
					present &^= 1 << f
				}
				setInt(c, f, v)
			}
			if i < 0 {
				return malformed(c)
			}

			// Separator.
			i = skipWS(b, i)
			if i >= len(b) {
				return malformed(c)
			}
			if b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if b[i] != '}' {
				return malformed(c)
			}
			i++
			break
		}
	}
	if skipWS(b, i) != len(b) {
		return malformed(c)
	}

	c.HasArrival = present&(1<<fArrival) != 0
	fillStrings(c, b, &spans)
	if prob != "" {
		return prob
	}
	for _, f := range requiredStrings {
		if spans[f].n == 0 {
			return missingReasons[f]
		}
	}
	for _, f := range requiredInts {
		if present&(1<<f) == 0 {
			return missingReasons[f]
		}
	}
	return c.checkValues()
}

// malformed resets c and returns ReasonMalformedJSON.
func malformed(c *Click) Reason {
	*c = Click{}
	return ReasonMalformedJSON
}

// first returns cur if a problem is already recorded, else r.
func first(cur, r Reason) Reason {
	if cur != "" {
		return cur
	}
	return r
}

// setInt stores v in the int field f of c.
func setInt(c *Click, f int, v int64) {
	switch f {
	case fImpression:
		c.ImpressionMs = v
	case fDevice:
		c.DeviceMs = v
	case fSpend:
		c.SpendMicros = v
	case fArrival:
		c.ArrivalMs = v
	}
}

// fillStrings copies the string fields located by spans into c, all in one
// allocation.
func fillStrings(c *Click, b []byte, spans *[numStringFields]span) {
	total := 0
	for f := range spans {
		total += spans[f].n
	}
	if total == 0 {
		return
	}
	var sb strings.Builder
	sb.Grow(total)
	var offs [numStringFields + 1]int
	for f := range spans {
		sp := &spans[f]
		switch {
		case sp.n == 0:
		case sp.esc:
			var tmp [MaxIDBytes]byte
			sb.Write(tmp[:unescape(tmp[:], b[sp.start:sp.end])])
		default:
			sb.Write(b[sp.start:sp.end])
		}
		offs[f+1] = sb.Len()
	}
	s := sb.String()
	c.ClickID = s[offs[fClickID]:offs[fClickID+1]]
	c.AdID = s[offs[fAdID]:offs[fAdID+1]]
	c.CampaignID = s[offs[fCampaignID]:offs[fCampaignID+1]]
	c.DeviceID = s[offs[fDeviceID]:offs[fDeviceID+1]]
	c.Shard = s[offs[fShard]:offs[fShard+1]]
}

// matchKey returns the field index of the key k, or -1.
func matchKey(k []byte) int {
	switch string(k) { // no allocation: the compiler compares in place
	case "click_id":
		return fClickID
	case "ad_id":
		return fAdID
	case "campaign_id":
		return fCampaignID
	case "device_id":
		return fDeviceID
	case "shard":
		return fShard
	case "impression_ms":
		return fImpression
	case "device_ms":
		return fDevice
	case "spend_micros":
		return fSpend
	case "arrival_ms":
		return fArrival
	}
	return -1
}

// matchEscapedKey decodes the escaped key whose raw bytes start at b[i]
// (after the opening quote) and returns its field index, or -1. A key that is
// not valid Unicode matches nothing (encoding/json would turn it into U+FFFD).
func matchEscapedKey(b []byte, i int) int {
	end, n, _, bad := scanString(b, i)
	if end < 0 || bad || n > maxKnownKey {
		return -1
	}
	var tmp [maxKnownKey]byte
	return matchKey(tmp[:unescape(tmp[:], b[i:end-1])])
}

// skipWS returns the index of the first byte at or after i that is not JSON
// whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\n', '\r', '\t':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString scans a string whose content starts at b[i] and returns the
// index after its closing quote (-1 on a syntax error) and whether it holds
// escapes. It checks syntax only.
func skipString(b []byte, i int) (end int, esc bool) {
	for {
		i = skipRun(b, i)
		if i >= len(b) {
			return -1, esc
		}
		switch b[i] {
		case '"':
			return i + 1, esc
		case '\\':
			esc = true
			n := escLen(b, i)
			if n < 0 {
				return -1, esc
			}
			i += n
		default: // a control character
			return -1, esc
		}
	}
}

// escLen returns the length of the escape sequence at b[i] ('\\'), or -1 if
// it is not a valid JSON escape.
func escLen(b []byte, i int) int {
	if i+1 >= len(b) {
		return -1
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if hex4(b, i+2) < 0 {
			return -1
		}
		return 6
	}
	return -1
}

// hex4 returns the value of the four hex digits at b[i:i+4], or -1.
func hex4(b []byte, i int) rune {
	if i+4 > len(b) {
		return -1
	}
	h0, h1, h2, h3 := hexVal[b[i]], hexVal[b[i+1]], hexVal[b[i+2]], hexVal[b[i+3]]
	if (h0|h1|h2|h3)&0xf0 != 0 { // some byte was not a hex digit
		return -1
	}
	return rune(h0)<<12 | rune(h1)<<8 | rune(h2)<<4 | rune(h3)
}

// isHighSurrogate and isLowSurrogate classify UTF-16 code units.
func isHighSurrogate(r rune) bool { return r >= 0xd800 && r < 0xdc00 }
func isLowSurrogate(r rune) bool  { return r >= 0xdc00 && r < 0xe000 }

// scanString scans a string whose content starts at b[i], checking syntax
// and Unicode. It returns the index after the closing quote (-1 on a syntax
// error), the decoded length in bytes, whether the string holds escapes, and
// whether it is bad Unicode: bytes that are not UTF-8 or an escaped surrogate
// that is not part of a pair. The decoded length is meaningful only when the
// string is not bad.
func scanString(b []byte, i int) (end, n int, esc, bad bool) {
	for {
		start := i
		i = plainRun(b, i)
		n += i - start
		if i >= len(b) {
			return -1, n, esc, bad
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, n, esc, bad
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return -1, n, esc, bad
			}
			if b[i+1] != 'u' {
				if escLen(b, i) < 0 {
					return -1, n, esc, bad
				}
				i += 2
				n++
				continue
			}
			r := hex4(b, i+2)
			if r < 0 {
				return -1, n, esc, bad
			}
			i += 6
			switch {
			case isHighSurrogate(r):
				if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' && isLowSurrogate(hex4(b, i+2)) {
					i += 6
					n += 4
				} else {
					bad = true // the next bytes are scanned on their own
				}
			case isLowSurrogate(r):
				bad = true
			default:
				n += utf8.RuneLen(r)
			}
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				bad = true
			}
			i += size
			n += size
		default: // a control character
			return -1, n, esc, bad
		}
	}
}

// unescape writes the decoded form of the raw string content s into dst and
// returns the number of bytes written. s must have passed scanString without
// being bad, and dst must hold its decoded length.
func unescape(dst, s []byte) int {
	w := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst[w] = c
			w++
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'u':
			r := hex4(s, i+2)
			i += 6
			if isHighSurrogate(r) {
				lo := hex4(s, i+2)
				r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
				i += 6
			}
			w += utf8.EncodeRune(dst[w:], r)
			continue
		default: // '"', '\\', '/'
			c = s[i+1]
		}
		dst[w] = c
		w++
		i += 2
	}
	return w
}

// scanNumber scans a JSON number at b[i] and returns the index after it (-1
// on a syntax error), and its value if it is an integer that fits int64 (ok).
// A fraction, an exponent or overflow give ok = false.
func scanNumber(b []byte, i int) (end int, v int64, ok bool) {
	neg := false
	if b[i] == '-' {
		neg = true
		i++
	}
	if i >= len(b) {
		return -1, 0, false
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit = 1 << 63
	}
	var u uint64
	ok = true
	switch c := b[i]; {
	case c == '0':
		i++
	case c >= '1' && c <= '9':
		start := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			u = u*10 + uint64(b[i]-'0')
		}
		if i-start > 18 { // 18 digits always fit; redo the longer ones with care
			u = 0
			for j := start; j < i; j++ {
				d := uint64(b[j] - '0')
				if u > (limit-d)/10 {
					ok = false
					break
				}
				u = u*10 + d
			}
		}
	default:
		return -1, 0, false
	}
	if i < len(b) && b[i] == '.' {
		ok = false
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return -1, 0, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		ok = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return -1, 0, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if !ok {
		return i, 0, false
	}
	if neg {
		return i, -int64(u), true
	}
	return i, int64(u), true
}

// skipValue skips the JSON value at b[i] and returns the index after it, or
// -1 on a syntax error. depth is the nesting depth of the enclosing
// container (0 at the top level).
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := skipString(b, i+1)
		return end
	case '{':
		return skipContainer(b, i+1, depth+1, '}')
	case '[':
		return skipContainer(b, i+1, depth+1, ']')
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	end, _, _ := scanNumber(b, i)
	return end
}

// literal returns the index after the literal lit at b[i], or -1.
func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// skipContainer skips the members of an object (closer '}') or the elements
// of an array (closer ']') starting after the opening bracket at b[i-1], and
// returns the index after the closer, or -1.
func skipContainer(b []byte, i, depth int, closer byte) int {
	if depth > maxDepth {
		return -1
	}
	i = skipWS(b, i)
	if i < len(b) && b[i] == closer {
		return i + 1
	}
	for {
		if closer == '}' {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			i, _ = skipString(b, i+1)
			if i < 0 {
				return -1
			}
			i = skipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			i = skipWS(b, i+1)
		}
		i = skipValue(b, i, depth)
		if i < 0 {
			return -1
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case closer:
			return i + 1
		default:
			return -1
		}
	}
}
