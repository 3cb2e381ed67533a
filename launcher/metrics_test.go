package launcher

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/launcher/proto"
)

// TestWriteMetrics: a hand-made snapshot renders to exactly these lines,
// with the host label escaped, and the text is valid exposition format.
func TestWriteMetrics(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &jobMetrics{ranks: 3, elastic: true, epoch: 2, inView: 2, perRank: []rankMetrics{
		{rank: 0, host: `h"1\a` + "\n", alive: true, paged: true, collectives: 1199, bytes: 4 << 20, busy: 2500 * time.Millisecond, wait: 750 * time.Millisecond, hubSent: 1 << 20, hubRecv: 3 << 20, in: true, since: now.Add(-12500 * time.Millisecond)},
		{rank: 1, host: "h2", alive: true, paged: true, collectives: 1200, bytes: 4<<20 + 4096, since: now.Add(-time.Hour)},
		{rank: 2, host: "h2", restarts: 1},
	}}
	var b bytes.Buffer
	if err := writeMetrics(&b, m, now); err != nil {
		t.Fatal(err)
	}
	want := `# HELP gorun_ranks Ranks in the job (-np); hubs are not counted.
# TYPE gorun_ranks gauge
gorun_ranks 3
# HELP gorun_ranks_alive Ranks started and not exited.
# TYPE gorun_ranks_alive gauge
gorun_ranks_alive 2
# HELP gorun_view_epoch Epoch of the job's current view (--elastic); 0 is the start.
# TYPE gorun_view_epoch gauge
gorun_view_epoch 2
# HELP gorun_view_ranks Ranks in the job's current view (--elastic).
# TYPE gorun_view_ranks gauge
gorun_view_ranks 2
# HELP gorun_stall_seconds How long the rank waiting longest inside one collective has been there; 0 when no rank is in one.
# TYPE gorun_stall_seconds gauge
gorun_stall_seconds 12.5
# HELP gorun_rank_alive 1 while the rank runs, else 0.
# TYPE gorun_rank_alive gauge
gorun_rank_alive{rank="0",host="h\"1\\a\n"} 1
gorun_rank_alive{rank="1",host="h2"} 1
gorun_rank_alive{rank="2",host="h2"} 0
# HELP gorun_rank_restarts_total Times the rank was started again (--max-restarts).
# TYPE gorun_rank_restarts_total counter
gorun_rank_restarts_total{rank="0",host="h\"1\\a\n"} 0
gorun_rank_restarts_total{rank="1",host="h2"} 0
gorun_rank_restarts_total{rank="2",host="h2"} 1
# HELP gorun_rank_collectives_total Collectives the rank completed, over all its processes (ranks using gorun's collectives).
# TYPE gorun_rank_collectives_total counter
gorun_rank_collectives_total{rank="0",host="h\"1\\a\n"} 1199
gorun_rank_collectives_total{rank="1",host="h2"} 1200
# HELP gorun_rank_payload_bytes_total Payload bytes of the collectives the rank completed, over all its processes.
# TYPE gorun_rank_payload_bytes_total counter
gorun_rank_payload_bytes_total{rank="0",host="h\"1\\a\n"} 4194304
gorun_rank_payload_bytes_total{rank="1",host="h2"} 4198400
# HELP gorun_rank_collective_seconds_total Time the rank spent inside collectives, over all its processes; less gorun_rank_wait_seconds_total, the time it moved and reduced data.
# TYPE gorun_rank_collective_seconds_total counter
gorun_rank_collective_seconds_total{rank="0",host="h\"1\\a\n"} 2.5
gorun_rank_collective_seconds_total{rank="1",host="h2"} 0
# HELP gorun_rank_wait_seconds_total Time the rank spent inside collectives waiting for its peers' data, over all its processes.
# TYPE gorun_rank_wait_seconds_total counter
gorun_rank_wait_seconds_total{rank="0",host="h\"1\\a\n"} 0.75
gorun_rank_wait_seconds_total{rank="1",host="h2"} 0
# HELP gorun_rank_hub_sent_bytes_total Payload bytes the rank sent to ParamHub hubs (pushes, and its parts of collectives through the hub), over all its processes.
# TYPE gorun_rank_hub_sent_bytes_total counter
gorun_rank_hub_sent_bytes_total{rank="0",host="h\"1\\a\n"} 1048576
gorun_rank_hub_sent_bytes_total{rank="1",host="h2"} 0
# HELP gorun_rank_hub_received_bytes_total Payload bytes the rank received from ParamHub hubs (pulls, and collectives' results through the hub), over all its processes.
# TYPE gorun_rank_hub_received_bytes_total counter
gorun_rank_hub_received_bytes_total{rank="0",host="h\"1\\a\n"} 3145728
gorun_rank_hub_received_bytes_total{rank="1",host="h2"} 0
# HELP gorun_rank_in_collective 1 while the rank is inside a collective, else 0.
# TYPE gorun_rank_in_collective gauge
gorun_rank_in_collective{rank="0",host="h\"1\\a\n"} 1
gorun_rank_in_collective{rank="1",host="h2"} 0
`
	if got := b.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	checkExposition(t, b.String())

	// Not elastic, nothing in a collective, no status page: no view, no
	// stall, no per-rank counters.
	m = &jobMetrics{ranks: 1, perRank: []rankMetrics{{rank: 0, host: "localhost", alive: true}}}
	b.Reset()
	if err := writeMetrics(&b, m, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	checkExposition(t, out)
	for _, s := range []string{"gorun_ranks_alive 1\n", "gorun_stall_seconds 0\n", `gorun_rank_alive{rank="0",host="localhost"} 1` + "\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in:\n%s", s, out)
		}
	}
	for _, s := range []string{"gorun_view_", "gorun_rank_collectives_total", "gorun_rank_payload_bytes_total", "gorun_rank_hub_sent_bytes_total", "gorun_rank_in_collective"} {
		if strings.Contains(out, s) {
			t.Errorf("%q in:\n%s", s, out)
		}
	}
}

var (
	metricName  = `[a-zA-Z_:][a-zA-Z0-9_:]*`
	labelPair   = `[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"`
	sampleLine  = regexp.MustCompile(`^(` + metricName + `)(\{` + labelPair + `(?:,` + labelPair + `)*\})? (-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|NaN|[-+]Inf)$`)
	commentLine = regexp.MustCompile(`^# (HELP|TYPE) (` + metricName + `) (.*)$`)
)

// checkExposition checks text against the text exposition format 0.0.4:
// every line is a HELP, a TYPE or a sample name{labels} value; each
// family has one HELP and one TYPE (a known type) before its samples,
// and its samples are together.
func checkExposition(t *testing.T, text string) {
	t.Helper()
	if !strings.HasSuffix(text, "\n") {
		t.Fatalf("no final line feed:\n%s", text)
	}
	help, typ, done := map[string]bool{}, map[string]bool{}, map[string]bool{}
	current := ""
	for i, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if m := commentLine.FindStringSubmatch(l); m != nil {
			name := m[2]
			if done[name] || (m[1] == "HELP" && help[name]) || (m[1] == "TYPE" && typ[name]) {
				t.Fatalf("line %d: %s again: %q", i+1, m[1], l)
			}
			if m[1] == "HELP" {
				help[name] = true
			} else if typ[name] = true; m[3] != "counter" && m[3] != "gauge" {
				t.Fatalf("line %d: type %q", i+1, m[3])
			}
			if current != "" && current != name {
				done[current] = true
			}
			current = name
			continue
		}
		m := sampleLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %d is not a sample: %q", i+1, l)
		}
		if name := m[1]; !help[name] || !typ[name] || name != current {
			t.Fatalf("line %d: sample of %s outside its family (HELP %v, TYPE %v)", i+1, name, help[name], typ[name])
		}
	}
}

// TestMetricsCounts: a rank's counts go on over a new page and over a
// restart, and a restart is counted.
func TestMetricsCounts(t *testing.T) {
	j := &job{np: 2, ranks: []rankState{{host: "a"}, {host: "b"}}}
	ins := newInspector(j, Config{})
	now := time.Now()
	status := func(pid int, seq, total uint64, in bool) *proto.Status {
		busy := time.Duration(total) * time.Millisecond
		return &proto.Status{State: inspect.State{Declared: true, Pid: pid, Seq: seq, Total: total, In: in, Busy: busy, Wait: busy / 4}}
	}
	ins.update(0, status(10, 5, 500, true), now)  // in #5: 4 completed
	ins.update(0, status(10, 6, 600, false), now) // 6 completed
	ins.update(0, status(11, 2, 200, false), now) // a new process (exec): 6 + 2
	ins.restarted(0)
	ins.update(0, status(12, 3, 300, false), now) // restarted: 8 + 3
	d := &driver{j: j, ins: ins, sv: newSupervisor(supervisorConfig{NP: 2, Agents: []supervisedAgent{{Name: "a", Ranks: []int{0, 1}}}}, now), inView: 2}
	j.ranks[0].started = true
	m := d.metricsSnapshot()
	r0, r1 := m.perRank[0], m.perRank[1]
	if !r0.paged || r0.collectives != 11 || r0.bytes != 1100 || r0.restarts != 1 || !r0.alive || r0.busy != 1100*time.Millisecond || r0.wait != 275*time.Millisecond {
		t.Errorf("rank 0: %+v, want 11 collectives, 1100 bytes, 1.1 s inside of which 275 ms waiting, 1 restart, alive", r0)
	}
	if r1.paged || r1.alive || r1.restarts != 0 {
		t.Errorf("rank 1: %+v, want no page, not started", r1)
	}
}

// TestMetricsURL: a listener on every address is named by this machine's
// name.
func TestMetricsURL(t *testing.T) {
	host, _ := os.Hostname()
	for addr, want := range map[string]string{
		"127.0.0.1:9400": "http://127.0.0.1:9400/metrics",
		"[::1]:9400":     "http://[::1]:9400/metrics",
		"0.0.0.0:9400":   "http://" + net.JoinHostPort(host, "9400") + "/metrics",
		"[::]:9400":      "http://" + net.JoinHostPort(host, "9400") + "/metrics",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := metricsURL(a); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}

// scrape GETs url and returns the body, or an error.
func scrape(url string) (string, http.Header, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), resp.Header, err
}

// TestMetricsEndpoint: a real job (local agents, two ranks of sh) serves
// its metrics on Config.Metrics while it runs, with both ranks alive, and
// the endpoint is gone once Run returns.
func TestMetricsEndpoint(t *testing.T) {
	proctest.SkipShort(t)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	url := "http://" + l.Addr().String() + "/metrics"
	cfg := DefaultConfig()
	cfg.Program, cfg.Gorun, cfg.NP, cfg.PMI = "sh", os.Args[0], 2, PMIOff
	cfg.Args = []string{"-c", `echo up; while [ ! -e "$0/end" ]; do sleep 0.02; done`, dir}
	cfg.Metrics = l
	var out, errb proctest.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errb
	type ran struct {
		res Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		done <- ran{res, err}
	}()
	var body string
	proctest.WaitFor(t, 30*time.Second, func() bool {
		body, _, _ = scrape(url)
		return strings.Contains(body, "\ngorun_ranks_alive 2\n")
	}, "both ranks alive on "+url)
	checkExposition(t, body)
	for _, s := range []string{"gorun_ranks 2\n", `gorun_rank_alive{rank="1",host="localhost"} 1` + "\n", `gorun_rank_restarts_total{rank="0",host="localhost"} 0` + "\n"} {
		if !strings.Contains(body, s) {
			t.Errorf("no %q in:\n%s", s, body)
		}
	}
	if _, h, err := scrape(url); err != nil || h.Get("Content-Type") != metricsContentType {
		t.Errorf("content type %q, %v", h.Get("Content-Type"), err)
	}
	if _, _, err := scrape("http://" + l.Addr().String() + "/"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("GET /: %v, want 404", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.res.ExitCode != 0 {
			t.Fatalf("exit %d, %v:\n%s", r.res.ExitCode, r.err, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("Run still running a minute after the ranks were told to end:\n%s", errb.String())
	}
	if body, _, err := scrape(url); err == nil {
		t.Fatalf("the endpoint is still there after the job:\n%s", body)
	}
}
