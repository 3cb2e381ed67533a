package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
)

func shmDir(t *testing.T) string {
	t.Helper()
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	return "/dev/shm"
}

func noSegments(t *testing.T, dir, job string) {
	t.Helper()
	left, _ := filepath.Glob(jobenv.ShmPattern(dir, job))
	if len(left) > 0 {
		t.Fatalf("segments left in %s: %v", dir, left)
	}
}

// exchange sends every frame in msgs from every rank to every other rank,
// from concurrent senders, and checks what each receives.
func exchange(t *testing.T, ts []*Mesh, msgs [][]byte) {
	t.Helper()
	// A budget against a hang, not a speed check: megabytes through a
	// 4 KiB ring, under the race detector on a busy machine, took over
	// 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ts)*len(ts))
	for from := range ts {
		for to := range ts {
			if from == to {
				continue
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i, m := range msgs {
					if err := ts[from].Send(ctx, to, transport.Header{Seq: uint32(i), Step: uint32(from), Count: uint64(len(m))}, m); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for i, m := range msgs {
					f, err := ts[to].Recv(ctx, from)
					if err != nil {
						errs <- err
						return
					}
					if f.Type != transport.TypeData || f.Seq != uint32(i) || f.Step != uint32(from) || f.Count != uint64(len(m)) || !bytes.Equal(f.Payload, m) {
						errs <- errors.New("frame corrupted in transit")
						return
					}
					f.Release()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func randomMsgs(seed uint64, sizes ...int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out [][]byte
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		out = append(out, b)
	}
	return out
}

// TestShmExchange: ranks on one host reach each other through shared
// memory, and frames of every size (empty, odd, longer than a ring's half,
// longer than the ring) arrive intact and in order, with small rings that
// wrap on nearly every frame.
func TestShmExchange(t *testing.T) {
	dir := shmDir(t)
	for _, ring := range []int{4096, 64 << 10, shmem.DefaultRingBytes} {
		ts := mesh(t, 3, func(r int, c *Config) { c.ShmRingBytes = ring })
		for _, tr := range ts {
			want := slices.DeleteFunc([]int{0, 1, 2}, func(p int) bool { return p == tr.Rank() })
			if got := tr.sharedMemoryPeers(); !slices.Equal(got, want) {
				t.Fatalf("ring %d: rank %d shares memory with %v, want %v", ring, tr.Rank(), got, want)
			}
		}
		noSegments(t, dir, testJob)
		sizes := []int{0, 1, 7, 8, 33, 4095, 2048, 1 << 12, 100_000, 3 << 20}
		for range 40 {
			sizes = append(sizes, rand.IntN(3*ring))
		}
		exchange(t, ts, randomMsgs(uint64(ring), sizes...))
		for _, tr := range ts {
			tr.Close()
		}
		noSegments(t, dir, testJob)
	}
}

// TestShmOnlyOnOneHost: ranks with different host keys, or with shared
// memory off on one side, stay on TCP and still exchange everything.
func TestShmOnlyOnOneHost(t *testing.T) {
	shmDir(t)
	ts := mesh(t, 3, func(r int, c *Config) { c.HostKey = []string{"a", "a", "b"}[r] })
	if got := ts[0].sharedMemoryPeers(); !slices.Equal(got, []int{1}) {
		t.Fatalf("rank 0 shares memory with %v, want [1] (rank 2 is on host b)", got)
	}
	if got := ts[2].sharedMemoryPeers(); len(got) != 0 {
		t.Fatalf("rank 2 shares memory with %v", got)
	}
	exchange(t, ts, randomMsgs(2, 0, 10, 1<<20))
	ts = mesh(t, 2, func(r int, c *Config) { c.Shm = r != 1 })
	if got := ts[0].sharedMemoryPeers(); len(got) != 0 {
		t.Fatalf("shared memory with a rank that turned it off: %v", got)
	}
	exchange(t, ts, randomMsgs(3, 0, 10, 1<<20))
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestShmFullFallsBack: when the segment's space cannot be reserved (a
// full /dev/shm), the pair uses TCP, one warning names the reason, and the
// data still arrives.
func TestShmFullFallsBack(t *testing.T) {
	dir := shmDir(t)
	var logs logBuf
	ts := mesh(t, 3, func(r int, c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.shmReserve = func(int, int64) error { return syscall.ENOSPC }
	})
	for _, tr := range ts {
		if got := tr.sharedMemoryPeers(); len(got) != 0 {
			t.Fatalf("rank %d shares memory with %v without space for it", tr.Rank(), got)
		}
	}
	exchange(t, ts, randomMsgs(4, 1, 1000, 1<<20))
	// Whichever rank of a pair dials creates the segment: at most one
	// warning per rank, and at least one.
	if n := strings.Count(logs.String(), "shared memory unavailable"); n < 1 || n > 3 || !strings.Contains(logs.String(), "no space left on device") {
		t.Fatalf("want one warning from each creating rank naming the reason, got %d:\n%s", n, logs.String())
	}
	noSegments(t, dir, testJob)
}

// TestShmFullTmpfs: the same with a real tmpfs too small for a segment.
func TestShmFullTmpfs(t *testing.T) {
	shmDir(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; TestShmFullFallsBack injects the failure instead")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	ts := mesh(t, 2, func(r int, c *Config) { c.ShmDir = dir })
	if got := ts[0].sharedMemoryPeers(); len(got) != 0 {
		t.Fatalf("shared memory in a 64 KiB tmpfs: %v", got)
	}
	exchange(t, ts, randomMsgs(5, 1, 1<<20))
	noSegments(t, dir, testJob)
}

// TestShmCorruptRing: a peer (here the test) that scribbles on the shared
// ring makes the receiver fail with an error naming it, not crash.
func TestShmCorruptRing(t *testing.T) {
	shmDir(t)
	for _, scribble := range []func(r *shmem.Ring){
		func(r *shmem.Ring) { r.Head().Store(r.Head().Load() + 1<<40) }, // head far ahead
		func(r *shmem.Ring) {
			binary.LittleEndian.PutUint32(r.Data(), 1<<30)
			r.Head().Store(r.Head().Load() + 64)
		}, // huge record
		func(r *shmem.Ring) {
			binary.LittleEndian.PutUint32(r.Data(), 48)
			binary.LittleEndian.PutUint32(r.Data()[4:], 99)
			r.Head().Store(48)
		},
		func(r *shmem.Ring) { // a frame that claims more payload than its record holds
			r.Put(shmem.RecFrame, transport.Header{Type: transport.TypeData}, make([]byte, 16))
			binary.LittleEndian.PutUint32(r.Data()[8+24:], 1000)
		},
		func(r *shmem.Ring) {
			r.Put(shmem.RecMore, transport.Header{Type: transport.TypeData}, make([]byte, 16))
		}, // a piece with no start
	} {
		ts := mesh(t, 2, nil)
		scribble(ts[0].conns[1].Load().shm.Load().Out) // rank 0's out ring is rank 1's in ring
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ts[1].Recv(ctx, 0)
		cancel()
		var pl *transport.PeerLostError
		if !errors.As(err, &pl) || pl.Rank != 0 || !strings.Contains(err.Error(), "shared memory") {
			t.Fatalf("got %v, want rank 0 lost over corrupt shared memory", err)
		}
		if err := ts[1].Err(); err == nil {
			t.Fatal("the transport goes on after corrupt shared memory")
		}
	}
}

// TestShmWakes: a receive asleep on a ring wakes on its context, on the
// world's failure, and on the peer's clean leave.
func TestShmWakes(t *testing.T) {
	shmDir(t)
	ts := mesh(t, 3, func(r int, c *Config) { c.SpinTime = 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := ts[0].Recv(ctx, 1); !transport.IsCanceled(err) {
		t.Fatalf("cancelled receive: %v", err)
	}
	ts = mesh(t, 3, func(r int, c *Config) { c.SpinTime, c.ConfirmTimeout = 0, 0 })
	done := make(chan error, 1)
	go func() { _, err := ts[0].Recv(context.Background(), 1); done <- err }()
	time.Sleep(50 * time.Millisecond)
	ts[0].PeerLost(2, "test: gone")
	if err := <-done; !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), "rank 2") {
		t.Fatalf("receive during a failure: %v", err)
	}
	ts = mesh(t, 2, func(r int, c *Config) { c.SpinTime = 0 })
	go func() { _, err := ts[0].Recv(context.Background(), 1); done <- err }()
	time.Sleep(50 * time.Millisecond)
	ts[1].Close()
	if err := <-done; !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("receive from a rank that closed: %v", err)
	}
}

// TestShmSendBlocksOnFullRing: a sender to a rank that does not read
// waits for room, and gives up with its context.
func TestShmSendBlocksOnFullRing(t *testing.T) {
	shmDir(t)
	ts := mesh(t, 2, func(r int, c *Config) { c.ShmRingBytes = 4096 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var err error
	for i := 0; err == nil && i < 100; i++ {
		err = ts[0].Send(ctx, 1, transport.Header{}, make([]byte, 1000))
	}
	if !transport.IsCanceled(err) {
		t.Fatalf("sending into a full ring: %v", err)
	}
}

// testJob is the job id of this package's test meshes: one per test
// process, so that the segments another process's tests (another run of
// the suite on this machine) create never look like this one's leftovers.
var testJob = fmt.Sprintf("job%d", os.Getpid())

// TestShmTrySend: TrySend sends a frame at once to a peer sharing memory
// while its ring has room for it whole, and sends nothing otherwise (a
// full ring, a frame over half the ring, a peer over TCP); the frames it
// sends and those Send sends arrive whole and in order.
func TestShmTrySend(t *testing.T) {
	shmDir(t)
	ts := mesh(t, 3, func(r int, c *Config) {
		c.ShmRingBytes = 4096
		c.Shm = r != 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// First use connects (Send), and the pair's ring is then in place.
	if err := ts[0].Send(ctx, 1, transport.Header{Seq: 0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Send(ctx, 2, transport.Header{Seq: 0}, nil); err != nil {
		t.Fatal(err)
	}
	if ts[0].TrySend(2, transport.Header{}, []byte("x")) {
		t.Fatal("TrySend went at once over TCP")
	}
	if ts[0].TrySend(1, transport.Header{}, make([]byte, 3000)) {
		t.Fatal("TrySend sent a frame longer than half the ring at once")
	}
	// Fill the ring with nothing read: TrySend stops, and never waits.
	msgs := randomMsgs(7, 0, 1, 100, 1000, 17, 1999, 2, 512, 1500, 3, 64, 1000, 1000, 1000, 1000)
	tried := 0
	for tried < len(msgs) && ts[0].TrySend(1, transport.Header{Seq: uint32(1 + tried), Count: uint64(len(msgs[tried]))}, msgs[tried]) {
		tried++
	}
	if tried == 0 || tried == len(msgs) {
		t.Fatalf("%d of %d frames went at once into a ring of 4 KiB", tried, len(msgs))
	}
	// The rest go by Send, or at once once there is room, in order.
	sent := make(chan error, 1)
	go func() {
		for i := tried; i < len(msgs); i++ {
			h := transport.Header{Seq: uint32(1 + i), Count: uint64(len(msgs[i]))}
			if i%2 == 1 && ts[0].TrySend(1, h, msgs[i]) {
				continue
			}
			if err := ts[0].Send(ctx, 1, h, msgs[i]); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for i := range len(msgs) + 1 {
		f, err := ts[1].Recv(ctx, 0)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if i > 0 && (f.Seq != uint32(i) || f.Count != uint64(len(msgs[i-1])) || !bytes.Equal(f.Payload, msgs[i-1])) {
			t.Fatalf("frame %d: got seq %d, %d bytes", i, f.Seq, len(f.Payload))
		}
		f.Release()
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	f, err := ts[2].Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
}
