// Package transporttest is a test aid: it lets tests outside package
// transport (collective's many-rank test) see which peers a
// *transport.TCP holds connections to, and which of them it reaches
// through shared memory, without those questions being part of
// transport's API. Package transport sets both functions when it is
// initialised; this package imports nothing, so that transport can
// import it.
package transporttest

// ConnectedPeers lists, in rank order, the peers tr (a *transport.TCP)
// holds a connection to; nil for anything else.
var ConnectedPeers func(tr any) []int

// SharedMemoryPeers lists, in rank order, the peers tr (a
// *transport.TCP) reaches through shared memory; nil for anything else.
var SharedMemoryPeers func(tr any) []int
