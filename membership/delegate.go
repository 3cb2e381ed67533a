package membership

// delegate is the Member as memberlist's Delegate: it publishes the
// member's metadata and hears and gossips goodbyes.
type delegate Member

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}
func (d *delegate) NotifyMsg(b []byte) {
	m := (*Member)(d)
	if r, ok := parseBye(b); ok && r >= 0 && r < m.cfg.Size {
		m.mu.Lock()
		seen := m.leaving[r]
		m.leaving[r] = true
		delete(m.dead, r) // a goodbye after the verdict: not to be tried
		m.mu.Unlock()
		if !seen {
			m.byes.QueueBroadcast(bye(append([]byte(nil), b...)))
		}
	}
}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.byes.GetBroadcasts(overhead, limit)
}
func (d *delegate) LocalState(bool) []byte        { return nil }
func (d *delegate) MergeRemoteState([]byte, bool) {}
