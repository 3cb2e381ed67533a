package tcp

import "github.com/gorun/gorun/internal/transporttest"

// Tests of other packages see a TCP's connections through
// internal/transporttest: they are not part of TCP's methods.
func init() {
	transporttest.ConnectedPeers = func(tr any) []int { return peersOf(tr, (*TCP).connectedPeers) }
	transporttest.SharedMemoryPeers = func(tr any) []int { return peersOf(tr, (*TCP).sharedMemoryPeers) }
}

func peersOf(tr any, list func(*TCP) []int) []int {
	if t, ok := tr.(*TCP); ok {
		return list(t)
	}
	return nil
}
