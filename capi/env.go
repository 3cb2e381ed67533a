//go:build cgo

package main

import (
	"bytes"
	"context"

	"github.com/gorun/gorun/collective"
)

// envBlock reads NUL-separated NAME=VALUE pairs (the later of two equal
// names wins; a pair without "=" is ignored, as the C library's getenv
// would never see it).
func envBlock(b []byte) map[string]string {
	vars := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte("=")); ok && len(k) > 0 {
			vars[string(k)] = string(v)
		}
	}
	return vars
}

// join joins the job that lookup's variables describe.
func join(ctx context.Context, lookup func(string) (string, bool)) (*collective.Comm, error) {
	cfg, err := collective.ConfigFromEnv(lookup)
	if err != nil {
		return nil, err
	}
	return collective.New(ctx, cfg)
}
