package sink

import "strconv"

// AppendJSON appends the item as one JSON object with the attribute names of
// the ad_metrics table (DESIGN.md §5), in a fixed order; attributes the item
// does not carry are left out. The same item always gives the same bytes.
func (it *Item) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"entity":`...)
	dst = strconv.AppendQuote(dst, it.Entity)
	dst = append(dst, `,"bucket":`...)
	dst = strconv.AppendQuote(dst, it.Bucket)
	if it.HasJobGen {
		dst = appendInt(dst, "job_gen", it.JobGen)
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
		dst = strconv.AppendQuote(dst, t.Ix)
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
