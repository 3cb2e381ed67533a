package proto

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/control"
)

// TestSkipBanner: a remote shell's noise before the agent's greeting is
// skipped (and kept for error messages), and the gob stream after it is
// intact.
func TestSkipBanner(t *testing.T) {
	var stream bytes.Buffer
	stream.WriteString("Welcome!\r\n" + strings.Repeat("x", 10000) + "\n" + Magic + "\n")
	if err := NewConn(nil, &stream).Send(&Message{Kind: MsgReady, Ready: &Ready{Hostname: "h1", Ports: []int{5}}}); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&stream)
	noise, err := SkipBanner(r)
	if err != nil || len(noise) != 2 || noise[0] != "Welcome!" || !strings.HasPrefix(noise[1], "xxx") {
		t.Fatalf("noise %q, err %v", noise, err)
	}
	m, err := NewConn(r, io.Discard).Recv()
	if err != nil || m.Kind != MsgReady || m.Ready.Hostname != "h1" || m.Ready.Ports[0] != 5 {
		t.Fatalf("after the banner: %+v, %v", m, err)
	}
	noise, err = SkipBanner(bufio.NewReader(strings.NewReader("bash: gorun: command not found\n")))
	if err != io.EOF || len(noise) != 1 || !strings.Contains(noise[0], "command not found") {
		t.Fatalf("no greeting: %q, %v", noise, err)
	}
	if _, err := SkipBanner(bufio.NewReader(strings.NewReader(strings.Repeat("spam\n", MaxBannerLines+1)))); err == nil || !strings.Contains(err.Error(), "no agent greeting") {
		t.Fatalf("endless noise: %v", err)
	}
}

func TestTrimNewline(t *testing.T) {
	for in, want := range map[string]string{"a\n": "a", "a\r\n": "a", "a": "a", "\n": "", "": "", "a\r": "a\r"} {
		if got := string(TrimNewline([]byte(in))); got != want {
			t.Errorf("TrimNewline(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRestartMessages: a restart, a join and a view with its joiners
// cross the stream whole.
func TestRestartMessages(t *testing.T) {
	var stream bytes.Buffer
	sent := []*Message{
		{Kind: MsgRestart, Rank: 2, Count: 1, Epoch: 3, Live: []int{0, 1, 3}},
		{Kind: MsgRestart, Rank: 3, Count: 1, Epoch: 3, Live: []int{0, 1}, RankSpec: &RankSpec{Rank: 3, LocalRank: 1, LocalSize: 2, NodeRank: 2}},
		{Kind: MsgJoin, Rank: 2, Addr: "10.0.0.3:4021", Host: "n2/5a1e"},
		{Kind: MsgView, Epoch: 4, Live: []int{0, 1, 2, 3}, Joined: []control.Joiner{{Rank: 2, Addr: "10.0.0.3:4021", Host: "n2/5a1e"}}},
		{Kind: MsgSpec, Spec: &HostSpec{Version: Version, Elastic: true, MaxRestarts: 2}},
	}
	w := NewConn(nil, &stream)
	for _, m := range sent {
		if err := w.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	r := NewConn(&stream, io.Discard)
	for _, want := range sent {
		got, err := r.Recv()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, %v; want %+v", got, err, want)
		}
	}
}
