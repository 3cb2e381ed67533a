package ps

import (
	"encoding/json"
	"io"
	"sync/atomic"
	"time"
)

// Metrics is one worker's record of one iteration.
type Metrics struct {
	Worker    int           `json:"worker"`
	Iteration int           `json:"iteration"`
	Batch     int           `json:"batch"`
	Compute   time.Duration `json:"compute_ns"`
	Wait      time.Duration `json:"wait_ns"` // blocked in Handle.Wait: idle time
	Push      time.Duration `json:"push_ns"` // from issue to the hubs' answers, summed
	Pull      time.Duration `json:"pull_ns"`
	BytesSent int64         `json:"bytes_sent"`
	BytesRecv int64         `json:"bytes_recv"`
	Staleness int           `json:"staleness"` // the largest a pull saw
}

type iterCounters struct {
	wait, push, pull atomic.Int64
	sent, recvd      atomic.Int64
	stale            atomic.Int64
	n                atomic.Int64
}

func (it *iterCounters) addWait(d time.Duration) { it.wait.Add(int64(d)) }

func (it *iterCounters) addTime(kind int, d time.Duration) {
	switch kind {
	case kindPush:
		it.push.Add(int64(d))
	case kindPull:
		it.pull.Add(int64(d))
	}
}

// addBytes counts payload bytes sent to and received from hubs, for the
// iteration and for ClientConfig.Traffic.
func (c *Client) addBytes(sent, recvd int64) {
	c.iter.addBytes(sent, recvd)
	if c.cfg.Traffic != nil {
		c.cfg.Traffic(sent, recvd)
	}
}

func (it *iterCounters) addBytes(sent, recvd int64) {
	it.sent.Add(sent)
	it.recvd.Add(recvd)
}

func (it *iterCounters) maxStale(s int) {
	for {
		cur := it.stale.Load()
		if int64(s) <= cur || it.stale.CompareAndSwap(cur, int64(s)) {
			return
		}
	}
}

// Tick ends an iteration: it records the iteration's batch size and
// compute time with the waits, push and pull times, bytes and staleness
// counted since the last Tick, writes them as a JSON line to
// ClientConfig.Metrics if set, and returns them.
func (c *Client) Tick(batch int, compute time.Duration) Metrics {
	it := &c.iter
	m := Metrics{
		Worker: c.cfg.Worker, Iteration: int(it.n.Add(1) - 1), Batch: batch, Compute: compute,
		Wait: time.Duration(it.wait.Swap(0)), Push: time.Duration(it.push.Swap(0)), Pull: time.Duration(it.pull.Swap(0)),
		BytesSent: it.sent.Swap(0), BytesRecv: it.recvd.Swap(0), Staleness: int(it.stale.Swap(0)),
	}
	c.mmu.Lock()
	defer c.mmu.Unlock()
	c.metrics = append(c.metrics, m)
	if c.cfg.Metrics != nil {
		_ = m.WriteJSON(c.cfg.Metrics)
	}
	return m
}

// WriteJSON writes m as one JSON line.
func (m Metrics) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Metrics returns every iteration recorded by Tick so far.
func (c *Client) Metrics() []Metrics {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	return append([]Metrics(nil), c.metrics...)
}
