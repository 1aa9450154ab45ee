package preagg

import (
	"errors"
	"fmt"
)

// MemDedup is an in-memory Dedup: the reference implementation for tests and
// small embedded runs. It is not safe for concurrent use.
type MemDedup struct {
	ids map[memKey]int64 // → expiry
}

type memKey struct {
	kg     int
	ad, id string
}

// NewMemDedup returns an empty MemDedup.
func NewMemDedup() *MemDedup { return &MemDedup{ids: make(map[memKey]int64)} }

// Insert implements Dedup. A copy with a later expiry than the one held
// extends it: the click is remembered until the latest of its copies'
// expiries.
func (m *MemDedup) Insert(kg int, ad, id string, expiryMs int64) (bool, error) {
	k := memKey{kg, ad, id}
	if exp, ok := m.ids[k]; ok {
		m.ids[k] = max(exp, expiryMs)
		return false, nil
	}
	m.ids[k] = expiryMs
	return true, nil
}

// Expire implements Dedup.
func (m *MemDedup) Expire(kgFrom, kgTo int, beforeMs int64) error {
	for k, exp := range m.ids {
		if k.kg >= kgFrom && k.kg < kgTo && exp < beforeMs {
			delete(m.ids, k)
		}
	}
	return nil
}

// Len returns the number of clicks (ad, id) held.
func (m *MemDedup) Len() int { return len(m.ids) }

func joinErrs(prefix string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", prefix, errors.Join(errs...))
}
