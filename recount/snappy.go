package recount

import (
	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/format"
)

// fastSnappy is the lake's page codec: standard Snappy blocks (any Snappy
// reader decodes them) made by the faster of klauspost's Snappy encoders,
// where parquet-go's own codec uses the slower "better" one. Safe for
// concurrent use.
type fastSnappy struct{ snappy.Codec }

func (fastSnappy) String() string { return "SNAPPY" }

func (fastSnappy) CompressionCodec() format.CompressionCodec { return format.Snappy }

func (fastSnappy) Encode(dst, src []byte) ([]byte, error) {
	return s2.EncodeSnappy(dst, src), nil
}
