package pmix

import (
	"context"
	"net"
	"testing"
	"time"
)

// FuzzParseHello: a handshake body never panics the parser, and what it
// accepts as a simple client has a namespace within the limit.
func FuzzParseHello(f *testing.F) {
	f.Add(okHello(0))
	f.Add(hello("native", nativeCred(1, 2), 0, "ns", 3, "4.2.8", "v41", 1, "hash"))
	f.Add(hello("none", nil, 5, "", 0, "5.0.7", "v41", 1, "hash"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHello(b)
		if err == nil && h.Flag == flagSimpleClient && len(h.Proc.Nspace) > MaxNspace {
			t.Fatalf("accepted a namespace of %d bytes", len(h.Proc.Nspace))
		}
		_, _ = h.check(0, 0)
	})
}

// discard is a connection that takes every write.
type discard struct{ net.Conn }

func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) Close() error                { return nil }

// FuzzMessage: any message body, as the first message of a session or
// after a commit, is answered or refused with an error; never a panic,
// never an allocation beyond the message's size (the decoders cap counts
// by what the buffer holds).
func FuzzMessage(f *testing.F) {
	f.Add(cmdMsg(cmdReq))
	f.Add(cmdMsg(cmdAbort, func(e *encoder) { e.count(1); e.int(3); e.packedString("x"); e.count(1); e.flex(0) }))
	f.Add(cmdMsg(cmdFence, func(e *encoder) {
		e.count(1)
		e.flex(1)
		e.count(1)
		e.proc(Proc{"gorun", RankWildcard})
		e.count(1)
		e.flex(1)
		e.count(1)
		e.info(Info{Key: "pmix.collect", Value: Bool(true)})
	}))
	f.Add(cmdMsg(cmdGet, func(e *encoder) {
		e.packedString("gorun")
		e.count(1)
		e.flex(0)
		e.count(1)
		e.flex(0)
		e.packedString("k")
	}))
	f.Add(cmdMsg(cmdCommit, func(e *encoder) {
		var inner encoder
		inner.kval("k", InfoArray([]Info{{Key: "a", Value: Uint32(1)}}))
		e.packedByte(ScopeGlobal)
		e.count(1)
		e.b = append(e.b, 1)
		e.flex(uint64(len(inner.b)))
		e.b = append(e.b, inner.b...)
	}))
	f.Add(commitMsg(ScopeGlobal, Info{Key: "pids", Value: pidArray(1, 2, 70000)}))
	f.Add(cmdMsg(cmdJobControl, func(e *encoder) {
		e.count(1)
		e.flex(0)
		e.count(1)
		e.flex(1)
		e.count(1)
		e.info(Info{Key: "pmix.reg.cleanup", Value: String("/dev/shm/x")})
	}))
	f.Fuzz(func(t *testing.T, msg []byte) {
		cfg := DefaultConfig()
		cfg.Hosts = []Host{{Name: "h", Ranks: []int{0, 1}}}
		cfg.Cleanup = func(int, []string, bool) {}
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		ss := &session{s: s, rank: 0, conn: discard{}}
		_ = ss.handle(ctx, 1, msg)
		cancel()
		s.Close()
		ss.wg.Wait()
	})
}
