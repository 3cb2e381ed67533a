package proto

import (
	"bufio"
	"encoding/gob"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Conn is one end of the launcher-agent stream. Send is safe for
// concurrent use; Recv is not.
type Conn struct {
	mu  sync.Mutex
	enc *gob.Encoder
	w   io.Writer
	dec *gob.Decoder
}

// NewConn returns a Conn that reads messages from r and writes them to w.
func NewConn(r io.Reader, w io.Writer) *Conn {
	return &Conn{enc: gob.NewEncoder(w), w: w, dec: gob.NewDecoder(r)}
}

// Send writes m (and flushes w if it can be flushed).
func (c *Conn) Send(m *Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(m); err != nil {
		return err
	}
	if f, ok := c.w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// Recv reads the next message.
func (c *Conn) Recv() (*Message, error) {
	m := new(Message)
	if err := c.dec.Decode(m); err != nil {
		return nil, err
	}
	return m, nil
}

// SkipBanner reads r up to and including the agent's Magic line and
// returns the first lines that came before it (a remote shell's noise, or
// an error message). It gives up after MaxBannerLines lines.
func SkipBanner(r *bufio.Reader) (noise []string, err error) {
	for range MaxBannerLines {
		line, err := r.ReadSlice('\n')
		s := strings.TrimRight(string(line), "\r\n") // before the next read reuses line
		for err == bufio.ErrBufferFull {             // a very long line: keep its start only
			_, err = r.ReadSlice('\n')
		}
		if err == nil && s == Magic {
			return noise, nil
		}
		if s != "" && len(noise) < 20 {
			noise = append(noise, s)
		}
		if err != nil {
			return noise, err
		}
	}
	return noise, fmt.Errorf("no agent greeting in the first %d lines", MaxBannerLines)
}

// TrimNewline cuts a trailing "\n" or "\r\n" off b.
func TrimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}
