//go:build cgo

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/reduce"
)

// Operation kinds; the Python package uses the same numbers.
const (
	opAllReduce = iota + 1
	opBroadcast
	opReduce
	opAllGather
	opReduceScatter
	opAllToAll
	opAllToAllV
	opGather
	opScatter
	opBarrier
	opSend
	opRecv
	opRecvAny // receive from any source; counts is one int64 that gets the sender
)

// Result codes of gorun_result.
const (
	codeOK = iota
	codePeerLost
	codeViewChanged
	codeMismatch
	codeClosed
	codeAborted
	codeTimeout
	codeOther
)

// codeOf classifies err for the caller's exception types.
func codeOf(err error) int {
	switch {
	case err == nil:
		return codeOK
	case errors.Is(err, collective.ErrViewChanged):
		return codeViewChanged
	case errors.Is(err, collective.ErrPeerLost):
		return codePeerLost
	case errors.Is(err, collective.ErrSizeMismatch):
		return codeMismatch
	case errors.Is(err, collective.ErrClosed):
		return codeClosed
	case errors.Is(err, collective.ErrAborted):
		return codeAborted
	case errors.Is(err, context.DeadlineExceeded):
		return codeTimeout
	}
	return codeOther
}

// queues is how many queues of finished operations there are: 0 is the
// Python package's, 1 its native fast path's (python/csrc), each emptied
// by its own collecting thread.
const queues = 2

// registry holds the communicators and the operations in flight, and the
// queues of finished operations.
type registry struct {
	mu    sync.Mutex
	next  int64
	comms map[int64]*collective.Comm
	works map[int64]*work       // started, not yet collected
	done  [queues][]int64       // finished, not yet returned by gorun_next
	wake  [queues]chan struct{} // a token when done[q] is not empty
}

// work is an operation's outcome: err is set before done is closed.
// While a thread waits for it in gorun_wait, it is not queued for
// gorun_next when it finishes: the waiter takes it.
type work struct {
	done    chan struct{}
	err     error
	waiters int
	queue   int // the queue it goes to when it finishes
}

var reg = registry{comms: map[int64]*collective.Comm{}, works: map[int64]*work{}}

func init() {
	for q := range reg.wake {
		reg.wake[q] = make(chan struct{}, 1)
	}
}

func (r *registry) id() int64 {
	r.next++
	return r.next
}

func (r *registry) addComm(c *collective.Comm) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.id()
	r.comms[id] = c
	return id
}

func (r *registry) comm(id int64) (*collective.Comm, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.comms[id]
	if !ok {
		return nil, fmt.Errorf("gorun: no communicator %d (closed, or never made): %w", id, collective.ErrClosed)
	}
	return c, nil
}

// finish records an operation's outcome, wakes its waiter and queues it
// for gorun_next.
func (r *registry) finish(id int64, err error) {
	r.mu.Lock()
	w := r.works[id]
	w.err = err
	close(w.done)
	if w.waiters > 0 {
		r.mu.Unlock()
		return
	}
	r.done[w.queue] = append(r.done[w.queue], id)
	r.mu.Unlock()
	select {
	case r.wake[w.queue] <- struct{}{}:
	default:
	}
}

// setErr writes msg into errbuf (NUL-terminated, cut to fit).
func setErr(errbuf *C.char, n C.int, err error) {
	if errbuf == nil || n <= 0 || err == nil {
		return
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(errbuf)), int(n))
	k := copy(buf[:len(buf)-1], err.Error())
	buf[k] = 0
}

// gorun_join joins a job and returns the communicator. Its settings come
// from env, envLen bytes of NUL-separated NAME=VALUE pairs in the form of
// the environment gorun gives a rank (collective.ConfigFromEnv): the
// caller passes its environment as it is now (variables set after the
// process started count), with whatever a rendezvous of its own found. A
// NULL env reads the process's environment as it was at start.
//
//export gorun_join
func gorun_join(env *C.char, envLen C.int, timeoutMs C.int64_t, errbuf *C.char, errlen C.int) C.int64_t {
	lookup := os.LookupEnv
	if env != nil && envLen >= 0 {
		vars := envBlock(C.GoBytes(unsafe.Pointer(env), envLen))
		lookup = func(k string) (string, bool) {
			v, ok := vars[k]
			return v, ok
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeoutMs)*time.Millisecond)
	defer cancel()
	c, err := join(ctx, lookup)
	if err != nil {
		setErr(errbuf, errlen, err)
		return -1
	}
	return C.int64_t(reg.addComm(c))
}

// What gorun_info reports.
const (
	infoRank = iota // the job's rank (in a child: the child's)
	infoSize        // ranks in the current view (in a child: the child's)
	infoJobSize
	infoRestarts
	infoEpoch
	infoIndex   // place in the current view
	infoElastic // 1 when a lost rank changes the view instead of ending the job
	infoHub     // 1 under the hub strategy
	infoExact   // 1 when float sums are exact (Config.Exact)
)

// gorun_info reports one fact about a communicator, or -1 if it is closed.
//
//export gorun_info
func gorun_info(comm C.int64_t, what C.int) C.int64_t {
	c, err := reg.comm(int64(comm))
	if err != nil {
		return -1
	}
	v := c.View()
	switch what {
	case infoRank:
		return C.int64_t(c.Rank())
	case infoSize:
		return C.int64_t(c.Size())
	case infoJobSize:
		return C.int64_t(c.JobSize())
	case infoRestarts:
		return C.int64_t(c.Restarts())
	case infoEpoch:
		return C.int64_t(v.Epoch)
	case infoIndex:
		return C.int64_t(v.Index(c.Rank()))
	case infoElastic:
		return C.int64_t(boolInt(c.Elastic()))
	case infoExact:
		return C.int64_t(boolInt(c.Exact()))
	case infoHub:
		return C.int64_t(boolInt(c.Strategy() == collective.StrategyHub))
	}
	return -1
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gorun_set_exact turns exact float sums on (1) or off (0) for comm's
// collectives from now on (collective.Comm.SetExact). It returns -1 if
// comm is closed.
//
//export gorun_set_exact
func gorun_set_exact(comm C.int64_t, on C.int) C.int {
	c, err := reg.comm(int64(comm))
	if err != nil {
		return -1
	}
	c.SetExact(on != 0)
	return 0
}

// gorun_view writes the current view's job ranks into out (at most n) and
// returns how many there are.
//
//export gorun_view
func gorun_view(comm C.int64_t, out *C.int64_t, n C.int) C.int {
	c, err := reg.comm(int64(comm))
	if err != nil {
		return -1
	}
	ranks := c.View().Ranks
	if out != nil && n > 0 {
		dst := unsafe.Slice((*int64)(unsafe.Pointer(out)), int(n))
		for i := 0; i < len(ranks) && i < len(dst); i++ {
			dst[i] = int64(ranks[i])
		}
	}
	return C.int(len(ranks))
}

// gorun_create_group makes the child of comm holding ranks (places in
// comm) in that order: collective.CreateGroup.
//
//export gorun_create_group
func gorun_create_group(comm C.int64_t, ranks *C.int64_t, n C.int, tag C.int64_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int) C.int64_t {
	c, err := reg.comm(int64(comm))
	if err != nil {
		setErr(errbuf, errlen, err)
		return -1
	}
	if n < 0 || (n > 0 && ranks == nil) {
		setErr(errbuf, errlen, fmt.Errorf("gorun: create group: %d ranks at %p", n, ranks))
		return -1
	}
	rs := make([]int, n)
	for i, r := range unsafe.Slice((*int64)(unsafe.Pointer(ranks)), int(n)) {
		rs[i] = int(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeoutMs)*time.Millisecond)
	defer cancel()
	child, err := c.CreateGroup(ctx, rs, int(tag))
	if err != nil {
		setErr(errbuf, errlen, err)
		return -1
	}
	return C.int64_t(reg.addComm(child))
}

// gorun_close closes a communicator (the job's leaves the job; a child is
// released). Closing one that is already closed does nothing.
//
//export gorun_close
func gorun_close(comm C.int64_t) C.int {
	reg.mu.Lock()
	c, ok := reg.comms[int64(comm)]
	delete(reg.comms, int64(comm))
	reg.mu.Unlock()
	if ok {
		c.Close()
	}
	return 0
}

// op is a started operation's arguments.
type op struct {
	kind, dtype, redop, root, tag int
	send, recv                    unsafe.Pointer
	nsend, nrecv                  int
	counts                        []int  // AllToAllV: send counts then receive counts
	from                          *int64 // RecvAny: where the sender's place goes
}

// gorun_start starts an operation and returns its id at once; gorun_next
// returns the id when it is done. Counts are in elements. An operation
// that cannot start still gets an id, and its error comes from
// gorun_result.
//
//export gorun_start
func gorun_start(comm C.int64_t, kind, dtype, redop, root, tag C.int, send unsafe.Pointer, nsend C.int64_t, recv unsafe.Pointer, nrecv C.int64_t, counts *C.int64_t, ncounts C.int, timeoutMs C.int64_t) C.int64_t {
	return gorun_start_on(0, comm, kind, dtype, redop, root, tag, send, nsend, recv, nrecv, counts, ncounts, timeoutMs)
}

// gorun_start_on is gorun_start for a queue of finished operations other
// than gorun_next's (0): gorun_next_on(queue) returns the id when it is
// done. An unknown queue starts nothing and gives -1.
//
//export gorun_start_on
func gorun_start_on(queue C.int, comm C.int64_t, kind, dtype, redop, root, tag C.int, send unsafe.Pointer, nsend C.int64_t, recv unsafe.Pointer, nrecv C.int64_t, counts *C.int64_t, ncounts C.int, timeoutMs C.int64_t) C.int64_t {
	q := int(queue)
	if q < 0 || q >= queues {
		return -1
	}
	reg.mu.Lock()
	id := reg.id()
	reg.works[id] = &work{done: make(chan struct{}), queue: q}
	reg.mu.Unlock()
	c, err := reg.comm(int64(comm))
	o := op{kind: int(kind), dtype: int(dtype), redop: int(redop), root: int(root), tag: int(tag), send: send, recv: recv, nsend: int(nsend), nrecv: int(nrecv)}
	if int(kind) == opRecvAny {
		if ncounts != 1 || counts == nil {
			err = fmt.Errorf("gorun: receive from any source: %d counts, want the sender's slot", ncounts)
		}
		o.from = (*int64)(unsafe.Pointer(counts))
	} else if ncounts > 0 && counts != nil {
		for _, x := range unsafe.Slice((*int64)(unsafe.Pointer(counts)), int(ncounts)) {
			o.counts = append(o.counts, int(x))
		}
	}
	if err != nil {
		reg.finish(id, err)
		return C.int64_t(id)
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if timeoutMs > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
	}
	var wait func() error
	switch uint8(o.dtype) {
	case reduce.Float32:
		wait, err = start[float32](ctx, c, o)
	case reduce.Float64:
		wait, err = start[float64](ctx, c, o)
	case reduce.Int32:
		wait, err = start[int32](ctx, c, o)
	case reduce.Int64:
		wait, err = start[int64](ctx, c, o)
	case reduce.Int8:
		wait, err = start[int8](ctx, c, o)
	case reduce.Uint8:
		wait, err = start[uint8](ctx, c, o)
	default:
		err = fmt.Errorf("gorun: unknown element type %d", o.dtype)
	}
	if err != nil {
		cancel()
		reg.finish(id, err)
		return C.int64_t(id)
	}
	go func() {
		err := wait()
		cancel()
		reg.finish(id, err)
	}()
	return C.int64_t(id)
}

// gorun_run runs an all-reduce, broadcast, reduce, all-gather or barrier
// on the calling thread and returns when it is done, with its result
// code (and message in errbuf): no goroutine or thread hand-off between
// the call and the bytes, which is what a small operation's time is made
// of. The arguments are gorun_start's; other kinds are refused.
//
//export gorun_run
func gorun_run(comm C.int64_t, kind, dtype, redop, root C.int, send unsafe.Pointer, nsend C.int64_t, recv unsafe.Pointer, nrecv C.int64_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int) C.int {
	err := run(int64(comm), op{kind: int(kind), dtype: int(dtype), redop: int(redop), root: int(root), send: send, recv: recv, nsend: int(nsend), nrecv: int(nrecv)}, int64(timeoutMs))
	setErr(errbuf, errlen, err)
	return C.int(codeOf(err))
}

func run(comm int64, o op, timeoutMs int64) error {
	c, err := reg.comm(comm)
	if err != nil {
		return err
	}
	// A call from C runs on a goroutine locked to the calling thread.
	ctx, cancel := cpu.WithLockedThread(context.Background()), context.CancelFunc(func() {})
	if timeoutMs > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
	}
	defer cancel()
	switch uint8(o.dtype) {
	case reduce.Float32:
		return runNow[float32](ctx, c, o)
	case reduce.Float64:
		return runNow[float64](ctx, c, o)
	case reduce.Int32:
		return runNow[int32](ctx, c, o)
	case reduce.Int64:
		return runNow[int64](ctx, c, o)
	case reduce.Int8:
		return runNow[int8](ctx, c, o)
	case reduce.Uint8:
		return runNow[uint8](ctx, c, o)
	}
	return fmt.Errorf("gorun: unknown element type %d", o.dtype)
}

// runNow runs o with the collective package's blocking calls, on the
// caller's goroutine.
func runNow[T collective.Number](ctx context.Context, c *collective.Comm, o op) error {
	send, recv := slice[T](o.send, o.nsend), slice[T](o.recv, o.nrecv)
	if o.nsend < 0 || o.nrecv < 0 || (o.nsend > 0 && o.send == nil) || (o.nrecv > 0 && o.recv == nil) {
		return fmt.Errorf("gorun: %d send and %d receive elements at %p and %p", o.nsend, o.nrecv, o.send, o.recv)
	}
	redop := collective.Op(o.redop)
	switch o.kind {
	case opAllReduce:
		return collective.AllReduce(ctx, c, send, redop)
	case opBroadcast:
		return collective.Broadcast(ctx, c, send, o.root)
	case opReduce:
		return collective.Reduce(ctx, c, send, redop, o.root)
	case opAllGather:
		return collective.AllGather(ctx, c, send, recv)
	case opBarrier:
		return c.Barrier(ctx)
	}
	return fmt.Errorf("gorun: operation %d does not run on the calling thread", o.kind)
}

// slice views n elements of C memory at p as a []T.
func slice[T collective.Number](p unsafe.Pointer, n int) []T {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*T)(p), n)
}

// start starts o on c and returns what waits for it.
func start[T collective.Number](ctx context.Context, c *collective.Comm, o op) (func() error, error) {
	send, recv := slice[T](o.send, o.nsend), slice[T](o.recv, o.nrecv)
	if o.nsend < 0 || o.nrecv < 0 || (o.nsend > 0 && o.send == nil) || (o.nrecv > 0 && o.recv == nil) {
		return nil, fmt.Errorf("gorun: %d send and %d receive elements at %p and %p", o.nsend, o.nrecv, o.send, o.recv)
	}
	redop := collective.Op(o.redop)
	var h *collective.Handle
	switch o.kind {
	case opAllReduce:
		h = collective.StartAllReduce(ctx, c, send, redop)
	case opBroadcast:
		h = collective.StartBroadcast(ctx, c, send, o.root)
	case opReduce:
		h = collective.StartReduce(ctx, c, send, redop, o.root)
	case opAllGather:
		h = collective.StartAllGather(ctx, c, send, recv)
	case opReduceScatter:
		// send is every rank's block in turn; recv gets this rank's.
		if o.nsend != o.nrecv*c.Size() {
			return nil, fmt.Errorf("gorun: reduce-scatter of %d elements into %d, want %d ranks x %d", o.nsend, o.nrecv, c.Size(), o.nrecv)
		}
		// This rank's share, from the view the collective starts in (a
		// view change fails it with ErrViewChanged).
		idx := c.View().Index(c.Rank())
		if idx < 0 {
			return nil, fmt.Errorf("gorun: reduce-scatter: rank %d is not in the view: %w", c.Rank(), collective.ErrViewChanged)
		}
		h = collective.StartReduceScatter(ctx, c, send, redop)
		return func() error {
			if err := wait(h); err != nil {
				return err
			}
			copy(recv, send[idx*o.nrecv:(idx+1)*o.nrecv])
			return nil
		}, nil
	case opAllToAll:
		h = collective.StartAllToAll(ctx, c, send, recv)
	case opAllToAllV:
		n := c.Size()
		if len(o.counts) != 2*n {
			return nil, fmt.Errorf("gorun: all-to-all with %d counts, want %d send and %d receive counts", len(o.counts), n, n)
		}
		h = collective.StartAllToAllV(ctx, c, send, o.counts[:n], recv, o.counts[n:])
	case opGather:
		h = collective.StartGather(ctx, c, send, recv, o.root)
	case opScatter:
		h = collective.StartScatter(ctx, c, send, recv, o.root)
	case opBarrier:
		h = c.StartBarrier(ctx)
	case opSend:
		return p2p.after(c, o.root, o.tag, true, func() error { return collective.Send(ctx, c, send, o.root, o.tag) }), nil
	case opRecv:
		return p2p.after(c, o.root, o.tag, false, func() error { return collective.Recv(ctx, c, recv, o.root, o.tag) }), nil
	case opRecvAny:
		// Receives from any source run one after another, as those of one
		// source do.
		return p2p.after(c, -1, o.tag, false, func() error {
			from, err := collective.RecvAny(ctx, c, recv, o.tag)
			*o.from = int64(from)
			return err
		}), nil
	default:
		return nil, fmt.Errorf("gorun: unknown operation %d", o.kind)
	}
	return func() error { return wait(h) }, nil
}

// wait waits until h is done, however it ends: a Wait whose context
// ended would return while the collective still used the caller's memory.
// The collective's own context (the operation's timeout) ends it.
func wait(h *collective.Handle) error { return h.Wait(context.Background()) }

// p2pOrder runs the sends (and the receives) of one communicator, peer
// and tag one after another, in the order they were started, as the
// collective package's order guarantee needs: each in its own goroutine
// they could overtake each other.
type p2pOrder struct {
	mu   sync.Mutex
	last map[p2pKey]chan struct{} // the latest operation's end
}

type p2pKey struct {
	c         *collective.Comm
	peer, tag int
	send      bool
}

var p2p = p2pOrder{last: map[p2pKey]chan struct{}{}}

// after returns run, made to start once the previous operation of its
// key has ended.
func (q *p2pOrder) after(c *collective.Comm, peer, tag int, send bool, run func() error) func() error {
	k := p2pKey{c, peer, tag, send}
	mine := make(chan struct{})
	q.mu.Lock()
	prev := q.last[k]
	q.last[k] = mine
	q.mu.Unlock()
	return func() error {
		if prev != nil {
			<-prev
		}
		defer func() {
			q.mu.Lock()
			if q.last[k] == mine {
				delete(q.last, k)
			}
			q.mu.Unlock()
			close(mine)
		}()
		return run()
	}
}

// gorun_next waits up to timeoutMs for an operation to finish and returns
// its id, or 0 if none finished in time.
//
//export gorun_next
func gorun_next(timeoutMs C.int64_t) C.int64_t {
	return gorun_next_on(0, timeoutMs)
}

// gorun_next_on is gorun_next for the operations started with
// gorun_start_on(queue); an unknown queue gives 0 at once.
//
//export gorun_next_on
func gorun_next_on(queue C.int, timeoutMs C.int64_t) C.int64_t {
	q := int(queue)
	if q < 0 || q >= queues {
		return 0
	}
	timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer timer.Stop()
	for {
		reg.mu.Lock()
		if len(reg.done[q]) > 0 {
			id := reg.done[q][0]
			reg.done[q] = reg.done[q][1:]
			more := len(reg.done[q]) > 0
			reg.mu.Unlock()
			if more {
				select {
				case reg.wake[q] <- struct{}{}:
				default:
				}
			}
			return C.int64_t(id)
		}
		reg.mu.Unlock()
		select {
		case <-reg.wake[q]:
		case <-timer.C:
			return 0
		}
	}
}

// gorun_wait waits up to timeoutMs (forever if negative) for one
// operation. It returns 2 when the operation finished while this thread
// waited: it is then this thread's, and gorun_next will not return it; 1
// when it had finished before (gorun_next returns it, or did), or was
// collected already; 0 if it is not done yet. It does not collect it. A
// thread that waits for its own operation this way is woken directly,
// without a hand-off through the thread that calls gorun_next.
//
// It parks at once rather than polling first. The caller's thread came
// from C, so its goroutine is locked to it: while it polls it holds one of
// the runtime's Ps, which under gorun's GOMAXPROCS (cores / ranks on the
// host, often 1) is the only one, so the operation it waits for cannot
// run; and each runtime.Gosched from a locked goroutine hands the P to
// another thread and back (tens of microseconds). Parking hands the P to
// the operation's goroutines until it is done.
//
//export gorun_wait
func gorun_wait(id C.int64_t, timeoutMs C.int64_t) C.int {
	reg.mu.Lock()
	w, ok := reg.works[int64(id)]
	if !ok {
		reg.mu.Unlock()
		return 1
	}
	select {
	case <-w.done:
		reg.mu.Unlock()
		return 1
	default:
	}
	w.waiters++
	reg.mu.Unlock()
	var timeout <-chan time.Time
	if timeoutMs >= 0 {
		timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-w.done:
		return 2
	case <-timeout:
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	select {
	case <-w.done: // finished as the wait ended: still this thread's
		return 2
	default:
	}
	w.waiters--
	return 0
}

// gorun_result returns a finished operation's result code (0: success),
// writes its error message into errbuf, and forgets it. An id that is not
// finished, or was already collected, gives -1.
//
//export gorun_result
func gorun_result(id C.int64_t, errbuf *C.char, errlen C.int) C.int {
	reg.mu.Lock()
	w, ok := reg.works[int64(id)]
	if ok {
		select {
		case <-w.done:
			delete(reg.works, int64(id))
		default:
			ok = false
		}
	}
	reg.mu.Unlock()
	if !ok {
		setErr(errbuf, errlen, fmt.Errorf("gorun: operation %d is not finished, or was collected already", id))
		return -1
	}
	setErr(errbuf, errlen, w.err)
	return C.int(codeOf(w.err))
}

// gorun_resync gives every rank of the view the state of its first rank
// that holds it (collective.ResyncBytes). It blocks. The result is in
// memory from malloc, which the caller frees with gorun_free.
//
//export gorun_resync
func gorun_resync(comm C.int64_t, state unsafe.Pointer, n C.int64_t, out **C.char, outn *C.int64_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int) C.int {
	c, err := reg.comm(int64(comm))
	if err != nil {
		setErr(errbuf, errlen, err)
		return C.int(codeClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeoutMs)*time.Millisecond)
	defer cancel()
	got, err := collective.ResyncBytes(ctx, c, slice[uint8](state, int(n)))
	if err != nil {
		setErr(errbuf, errlen, err)
		return C.int(codeOf(err))
	}
	p := C.malloc(C.size_t(max(len(got), 1)))
	if p == nil {
		setErr(errbuf, errlen, fmt.Errorf("gorun: resync: no memory for %d bytes", len(got)))
		return C.int(codeOther)
	}
	copy(unsafe.Slice((*byte)(p), len(got)), got)
	*out = (*C.char)(p)
	*outn = C.int64_t(len(got))
	return C.int(codeOK)
}

// gorun_free frees what gorun_resync returned.
//
//export gorun_free
func gorun_free(p unsafe.Pointer) { C.free(p) }
