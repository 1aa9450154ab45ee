package recount

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// memStore is a map-backed Store for tests and benchmarks.
type memStore struct {
	mu   sync.Mutex
	objs map[string][]byte
	puts int
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) Put(_ context.Context, key string, data []byte) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = slices.Clone(data)
	m.puts++
	return nil
}

func (m *memStore) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("mem: get %s: %w", key, ErrNotFound)
	}
	return b, nil
}

func (m *memStore) List(_ context.Context, prefix, startAfter string, fn func(string) error) error {
	m.mu.Lock()
	var keys []string
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		if err := fn(k); err != nil {
			if err == ErrStopList {
				return nil
			}
			return err
		}
	}
	return nil
}

func (m *memStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *memStore) keys() []string {
	var ks []string
	m.List(context.Background(), "", "", func(k string) error { ks = append(ks, k); return nil })
	return ks
}
