package transport

// Queued is how many frames the Mux holds for readers that have not come
// for them (tests of other packages: mux_test.go).
func (m *Mux) Queued() int { return m.queued() }
