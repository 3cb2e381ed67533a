package launcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/internal/inspect"
)

// The job's metrics (Config.Metrics, gorun --metrics ADDR): an HTTP
// endpoint, GET /metrics, in Prometheus's text exposition format 0.0.4,
// written here with the standard library. The driver's loop owns the
// job's state; it builds an immutable jobMetrics from it (on the ranks'
// lifecycle events at once, and after status pages changed at the next
// metricsEvery) and publishes it through an atomic pointer. The HTTP
// handler renders the latest one; it never touches the loop's state.

// metricsEvery is how often the loop publishes the ranks' status pages
// when they changed: as often as the agents read them.
const metricsEvery = 500 * time.Millisecond

// metricsShutdown bounds the wait for scrapes in flight when the job
// ends.
const metricsShutdown = 2 * time.Second

// metricsContentType is the text exposition format's content type.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// jobMetrics is the job at one moment, as /metrics shows it. Nothing
// changes it once it is published.
type jobMetrics struct {
	ranks   int  // -np (hubs not counted)
	elastic bool // --elastic with the ring strategy: the view is shown
	epoch   int  // the last view's epoch (0: the start)
	inView  int  // ranks in the last view
	perRank []rankMetrics
}

// rankMetrics is one rank in a jobMetrics.
type rankMetrics struct {
	rank     int
	host     string
	alive    bool // started, not exited, its agent not gone
	restarts int
	// paged: the rank keeps a status page (it uses gorun's collectives);
	// the fields below are only shown for such a rank.
	paged       bool
	collectives uint64        // collectives completed, over all its processes
	bytes       uint64        // their payload bytes
	busy, wait  time.Duration // time inside its collectives, and waiting for peers' data in them (--metrics times them)
	hubSent     uint64        // payload bytes it sent to ParamHub hubs
	hubRecv     uint64        // and received from them
	in          bool          // inside a collective now
	since       time.Time     // when its state last changed (launcher's clock)
}

// completed is the number of collectives a state says its rank finished.
func completed(s inspect.State) uint64 {
	if s.In && s.Seq > 0 {
		return s.Seq - 1
	}
	return s.Seq
}

// stall is how long the rank that has waited longest inside one
// collective has been there at now (0 if no running rank is in one).
func (m *jobMetrics) stall(now time.Time) time.Duration {
	var d time.Duration
	for _, r := range m.perRank {
		if r.alive && r.paged && r.in && !r.since.IsZero() {
			d = max(d, now.Sub(r.since))
		}
	}
	return d
}

// writeMetrics writes m at now in the text exposition format.
func writeMetrics(w io.Writer, m *jobMetrics, now time.Time) error {
	var b bytes.Buffer
	alive := 0
	for _, r := range m.perRank {
		if r.alive {
			alive++
		}
	}
	family(&b, "gorun_ranks", "gauge", "Ranks in the job (-np); hubs are not counted.")
	sample(&b, "gorun_ranks", "", strconv.Itoa(m.ranks))
	family(&b, "gorun_ranks_alive", "gauge", "Ranks started and not exited.")
	sample(&b, "gorun_ranks_alive", "", strconv.Itoa(alive))
	if m.elastic {
		family(&b, "gorun_view_epoch", "gauge", "Epoch of the job's current view (--elastic); 0 is the start.")
		sample(&b, "gorun_view_epoch", "", strconv.Itoa(m.epoch))
		family(&b, "gorun_view_ranks", "gauge", "Ranks in the job's current view (--elastic).")
		sample(&b, "gorun_view_ranks", "", strconv.Itoa(m.inView))
	}
	family(&b, "gorun_stall_seconds", "gauge", "How long the rank waiting longest inside one collective has been there; 0 when no rank is in one.")
	sample(&b, "gorun_stall_seconds", "", strconv.FormatFloat(m.stall(now).Round(time.Millisecond).Seconds(), 'f', -1, 64))

	perRank := func(name, typ, help string, paged bool, value func(r rankMetrics) string) {
		first := true
		for _, r := range m.perRank {
			if paged && !r.paged {
				continue
			}
			if first {
				family(&b, name, typ, help)
				first = false
			}
			sample(&b, name, `rank="`+strconv.Itoa(r.rank)+`",host="`+escapeLabel(r.host)+`"`, value(r))
		}
	}
	perRank("gorun_rank_alive", "gauge", "1 while the rank runs, else 0.", false, func(r rankMetrics) string { return flag01(r.alive) })
	perRank("gorun_rank_restarts_total", "counter", "Times the rank was started again (--max-restarts).", false, func(r rankMetrics) string { return strconv.Itoa(r.restarts) })
	perRank("gorun_rank_collectives_total", "counter", "Collectives the rank completed, over all its processes (ranks using gorun's collectives).", true, func(r rankMetrics) string { return strconv.FormatUint(r.collectives, 10) })
	perRank("gorun_rank_payload_bytes_total", "counter", "Payload bytes of the collectives the rank completed, over all its processes.", true, func(r rankMetrics) string { return strconv.FormatUint(r.bytes, 10) })
	perRank("gorun_rank_collective_seconds_total", "counter", "Time the rank spent inside collectives, over all its processes; less gorun_rank_wait_seconds_total, the time it moved and reduced data.", true, func(r rankMetrics) string { return seconds(r.busy) })
	perRank("gorun_rank_wait_seconds_total", "counter", "Time the rank spent inside collectives waiting for its peers' data, over all its processes.", true, func(r rankMetrics) string { return seconds(r.wait) })
	perRank("gorun_rank_hub_sent_bytes_total", "counter", "Payload bytes the rank sent to ParamHub hubs (pushes, and its parts of collectives through the hub), over all its processes.", true, func(r rankMetrics) string { return strconv.FormatUint(r.hubSent, 10) })
	perRank("gorun_rank_hub_received_bytes_total", "counter", "Payload bytes the rank received from ParamHub hubs (pulls, and collectives' results through the hub), over all its processes.", true, func(r rankMetrics) string { return strconv.FormatUint(r.hubRecv, 10) })
	perRank("gorun_rank_in_collective", "gauge", "1 while the rank is inside a collective, else 0.", true, func(r rankMetrics) string { return flag01(r.alive && r.in) })
	_, err := w.Write(b.Bytes())
	return err
}

func family(b *bytes.Buffer, name, typ, help string) {
	b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

func sample(b *bytes.Buffer, name, labels, value string) {
	b.WriteString(name)
	if labels != "" {
		b.WriteString("{" + labels + "}")
	}
	b.WriteString(" " + value + "\n")
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

func flag01(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// escapeLabel escapes a label value as the text format wants: backslash,
// double quote and line feed.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// metricsServer serves the latest published jobMetrics on a listener.
type metricsServer struct {
	snap     atomic.Pointer[jobMetrics]
	srv      *http.Server
	logger   *slog.Logger
	served   chan struct{} // closed when Serve returned
	stopOnce sync.Once
}

// serveMetrics serves /metrics on l, starting with first, until stop.
func serveMetrics(l net.Listener, first *jobMetrics, logger *slog.Logger) *metricsServer {
	m := &metricsServer{logger: logger, served: make(chan struct{})}
	m.snap.Store(first)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	m.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(m.served)
		if err := m.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics: the server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
	logger.Info("metrics", "url", metricsURL(l.Addr()))
	return m
}

// publish makes s what the endpoint shows; s must not change after.
func (m *metricsServer) publish(s *jobMetrics) {
	if m != nil {
		m.snap.Store(s)
	}
}

func (m *metricsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	_ = writeMetrics(&b, m.snap.Load(), time.Now())
	w.Header().Set("Content-Type", metricsContentType)
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	_, _ = w.Write(b.Bytes())
}

// stop ends the server: it closes the listener, lets the scrapes in
// flight finish for up to metricsShutdown, and waits for its goroutine.
// It is idempotent, and does nothing on a nil server.
func (m *metricsServer) stop() {
	if m == nil {
		return
	}
	m.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
		defer cancel()
		if err := m.srv.Shutdown(ctx); err != nil {
			_ = m.srv.Close()
		}
		<-m.served
	})
}

// metricsURL is where a scraper finds the endpoint: for a listener on
// every address (":9400"), this machine's name.
func metricsURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String() + "/metrics"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics"
}

// viewed notes the job's view (--elastic) for the metrics.
func (d *driver) viewed(v control.View) {
	if v.Epoch != d.epoch || len(v.Live) != d.inView {
		d.epoch, d.inView = v.Epoch, len(v.Live)
		d.publishNow = true
	}
}

// publish gives the metrics server the job's state now.
func (d *driver) publish() {
	d.publishNow, d.publishSoon = false, false
	if d.metrics != nil {
		d.metrics.publish(d.metricsSnapshot())
	}
}

// metricsSnapshot is the job's state for the metrics, a copy the loop
// does not share.
func (d *driver) metricsSnapshot() *jobMetrics {
	j := d.j
	m := &jobMetrics{ranks: j.np, elastic: j.cfg.elasticity() == ringElastic, epoch: d.epoch, inView: d.inView, perRank: make([]rankMetrics, 0, len(d.ins.views))}
	for r, v := range d.ins.views {
		rs, c := j.ranks[r], d.ins.carried[r]
		m.perRank = append(m.perRank, rankMetrics{
			rank: r, host: rs.host, alive: rs.started && !rs.exited && !d.sv.done(rs.agent), restarts: d.ins.restarts[r],
			paged: v.State.Declared || c != (progress{}), collectives: c.collectives + completed(v.State), bytes: c.bytes + v.State.Total,
			busy: c.busy + v.State.Busy, wait: c.wait + v.State.Wait,
			hubSent: c.hubSent + v.State.HubSent, hubRecv: c.hubRecv + v.State.HubReceived,
			in: v.State.In && !v.Exited, since: v.State.Since,
		})
	}
	return m
}
