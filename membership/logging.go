package membership

import (
	"bufio"
	"io"
	"log/slog"
	"strings"
)

// logWriter turns memberlist's log lines into debug records, and decrypt
// failures and foreign labels (the mark of a wrong job secret or another
// job) into warnings. A stream that ended before its first byte shows up
// as one with the empty label, and one whose label did not come in time as
// a failed read of it: a peer that gave up a dial, or wrote late, on an
// overloaded host, not a stranger, so both stay debug records (a packet
// always carries what its sender wrote).
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `discarding stream with unacceptable label ""`) {
			w.log.Debug("memberlist: a stream ended before it began", "msg", line)
		} else if strings.Contains(line, "failed to receive and remove the stream label header") {
			w.log.Debug("memberlist: a stream's label did not come", "msg", line)
		} else if strings.Contains(line, "decrypt") || strings.Contains(line, "label") {
			w.log.Warn("membership: rejected a message (wrong job secret or job id?)", "memberlist", line)
		} else {
			w.log.Debug("memberlist", "msg", line)
		}
	}
	return len(p), nil
}

var _ io.Writer = (*logWriter)(nil)
