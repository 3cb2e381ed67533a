package transport

// Loss is a peer a transport found lost: its rank, and why (the reason
// its PeerLostError gives, as Lost says it).
type Loss struct {
	Rank   int
	Reason string
}
