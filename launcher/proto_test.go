package launcher

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestSkipBanner: a remote shell's noise before the agent's greeting is
// skipped (and kept for error messages), and the gob stream after it is
// intact.
func TestSkipBanner(t *testing.T) {
	var stream bytes.Buffer
	stream.WriteString("Welcome!\r\n" + strings.Repeat("x", 10000) + "\n" + agentMagic + "\n")
	if err := newConn(nil, &stream).Send(&msg{Kind: msgReady, Ready: &readyInfo{Hostname: "h1", Ports: []int{5}}}); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&stream)
	noise, err := skipBanner(r)
	if err != nil || len(noise) != 2 || noise[0] != "Welcome!" || !strings.HasPrefix(noise[1], "xxx") {
		t.Fatalf("noise %q, err %v", noise, err)
	}
	m, err := newConn(r, io.Discard).Recv()
	if err != nil || m.Kind != msgReady || m.Ready.Hostname != "h1" || m.Ready.Ports[0] != 5 {
		t.Fatalf("after the banner: %+v, %v", m, err)
	}
	noise, err = skipBanner(bufio.NewReader(strings.NewReader("bash: gorun: command not found\n")))
	if err != io.EOF || len(noise) != 1 || !strings.Contains(noise[0], "command not found") {
		t.Fatalf("no greeting: %q, %v", noise, err)
	}
	if _, err := skipBanner(bufio.NewReader(strings.NewReader(strings.Repeat("spam\n", maxBannerLines+1)))); err == nil || !strings.Contains(err.Error(), "no agent greeting") {
		t.Fatalf("endless noise: %v", err)
	}
}
