package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
)

// scrapeMetrics GETs a /metrics page and returns its samples by
// name{labels}; ok is false if it could not.
func scrapeMetrics(t *testing.T, url string) (map[string]float64, bool) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v:\n%s", url, resp.Status, err, b)
	}
	samples := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("GET %s: bad sample line %q", url, l)
		}
		samples[l[:i]] = v
	}
	return samples, true
}

// TestMetrics: gorun --metrics serves a running job's metrics (its URL
// logged with -v): two ranks of `gorun bench`'s rank program, running
// all-reduces for a few seconds, are both alive and their collectives
// count up from one scrape to a later one, and so does their hub traffic
// once the bench goes through the hub; once gorun is gone, so is the endpoint.
func TestMetrics(t *testing.T) {
	cmd, out, errb := gorunCmd(t, "-v", "--metrics", "127.0.0.1:0", "-np", "2",
		os.Args[0], benchRankCommand, "--sizes", "4KiB", "--target", "3s", "--format", "csv")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	urlRE := regexp.MustCompile(`msg=metrics url=(http://127\.0\.0\.1:\d+/metrics)`)
	var url string
	proctest.WaitFor(t, 60*time.Second, func() bool {
		m := urlRE.FindStringSubmatch(errb.String())
		if m != nil {
			url = m[1]
		}
		return url != ""
	}, "gorun -v to log the metrics URL")
	series := func(name string, rank int) string {
		return name + `{rank="` + strconv.Itoa(rank) + `",host="localhost"}`
	}
	collectives := func(s map[string]float64, rank int) float64 { return s[series("gorun_rank_collectives_total", rank)] }
	// The first scrape once both ranks completed collectives; the second
	// once both completed more.
	var first, second map[string]float64
	proctest.WaitFor(t, 60*time.Second, func() bool {
		s, ok := scrapeMetrics(t, url)
		if ok && collectives(s, 0) > 0 && collectives(s, 1) > 0 {
			first = s
		}
		return first != nil
	}, "both ranks to complete collectives at "+url)
	proctest.WaitFor(t, 60*time.Second, func() bool {
		s, ok := scrapeMetrics(t, url)
		if ok && collectives(s, 0) > collectives(first, 0) && collectives(s, 1) > collectives(first, 1) {
			second = s
		}
		return second != nil
	}, "the collectives to count up at "+url)
	for _, s := range []map[string]float64{first, second} {
		if s["gorun_ranks"] != 2 || s["gorun_ranks_alive"] != 2 || s[series("gorun_rank_alive", 0)] != 1 || s[series("gorun_rank_alive", 1)] != 1 {
			t.Errorf("want 2 ranks, both alive: %v", s)
		}
	}
	// Not bytes per collective: the bench's barriers carry no payload.
	if b0, b1 := first[series("gorun_rank_payload_bytes_total", 0)], second[series("gorun_rank_payload_bytes_total", 0)]; b0 <= 0 || b1 <= b0 {
		t.Errorf("rank 0's payload bytes: %v, then %v", b0, b1)
	}
	// --metrics times the collectives: time inside them counts up, and
	// the part spent waiting for the peer is a part of it.
	for r := range 2 {
		b0, b1 := first[series("gorun_rank_collective_seconds_total", r)], second[series("gorun_rank_collective_seconds_total", r)]
		w1 := second[series("gorun_rank_wait_seconds_total", r)]
		if b1 <= 0 || b1 < b0 || w1 < 0 || w1 > b1 {
			t.Errorf("rank %d: %v s in collectives, then %v s of which %v s waiting", r, b0, b1, w1)
		}
	}
	// The bench's second half runs the same all-reduces through the hub
	// in rank 0: both ranks' hub traffic counts up, both ways. (That the
	// counters stay at zero while a rank uses only the ring is
	// collective's TestHubBytesOnlyThroughHubs: which half the bench is in
	// at a scrape depends on how late the status pages arrive.)
	hub := func(s map[string]float64, rank int) (float64, float64) {
		return s[series("gorun_rank_hub_sent_bytes_total", rank)], s[series("gorun_rank_hub_received_bytes_total", rank)]
	}
	var third map[string]float64
	proctest.WaitFor(t, 60*time.Second, func() bool {
		s, ok := scrapeMetrics(t, url)
		tx0, rx0 := hub(s, 0)
		tx1, rx1 := hub(s, 1)
		if ok && tx0 > 0 && rx0 > 0 && tx1 > 0 && rx1 > 0 {
			third = s
		}
		return third != nil
	}, "both ranks' hub traffic to count up at "+url)
	t.Logf("rank 0: %v collectives, then %v; %v s inside them, %v s waiting", collectives(first, 0), collectives(second, 0),
		second[series("gorun_rank_collective_seconds_total", 0)], second[series("gorun_rank_wait_seconds_total", 0)])
	select {
	case err := <-exited:
		waited = true
		if err != nil {
			t.Fatalf("gorun: %v\n%s\n%s", err, out, errb)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("gorun still running 2 minutes later:\n%s", errb)
	}
	if _, ok := scrapeMetrics(t, url); ok {
		t.Fatalf("%s still answers after gorun exited", url)
	}
}

// TestMetricsBusyAddress: an address gorun cannot listen on fails the
// job before anything starts, naming the address.
func TestMetricsBusyAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	r := gorun(t, "--metrics", addr, "-np", "1", "echo", "ran")
	if r.code != 1 || !strings.Contains(r.stderr, "gorun: --metrics "+addr+": listen tcp "+addr) || strings.Contains(r.stdout, "ran") {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if r := gorun(t, "--metrics", "nowhere", "-np", "1", "echo", "ran"); r.code != 1 || !strings.Contains(r.stderr, "gorun: --metrics nowhere: ") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
