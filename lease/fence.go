package lease

import "github.com/adclick/adclick/sink/fence"

// A held lease fences a job's writes (package fence).
var _ fence.Fence = (*Lease)(nil)
