package world

import (
	"sync"

	"github.com/gorun/gorun/transport"
)

// Feed tells its subscribers (Transport.Losses) of each loss its
// transport finds. The owner publishes a loss and takes a subscriber's
// snapshot of Lost under the one lock that guards its record of losses,
// so that between its snapshot and its channel a subscriber sees every
// loss once. Each subscriber has a queue of its own: publishing never
// waits for a subscriber that is slow to read.
type Feed struct {
	mu     sync.Mutex
	subs   map[*sub]struct{}
	closed bool
}

// sub is one subscription: its queue, and the goroutine that hands
// the queue to out.
type sub struct {
	mu    sync.Mutex
	queue []transport.Loss
	wake  chan struct{} // a loss was queued (capacity 1)
	out   chan transport.Loss
	stop  chan struct{} // closed to end it
	once  sync.Once
	done  chan struct{} // closed when its goroutine returned
}

// subscribe returns a channel of the losses published from now on, and a
// function that ends the subscription (closing the channel; losses not
// yet received are dropped) and waits for its goroutine. A feed that is
// closed gives a closed channel.
func (f *Feed) Subscribe() (<-chan transport.Loss, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		ch := make(chan transport.Loss)
		close(ch)
		return ch, func() {}
	}
	s := &sub{wake: make(chan struct{}, 1), out: make(chan transport.Loss), stop: make(chan struct{}), done: make(chan struct{})}
	if f.subs == nil {
		f.subs = map[*sub]struct{}{}
	}
	f.subs[s] = struct{}{}
	go s.run()
	return s.out, func() {
		f.mu.Lock()
		delete(f.subs, s)
		f.mu.Unlock()
		s.end()
	}
}

// publish queues l for every subscriber.
func (f *Feed) Publish(l transport.Loss) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		s.mu.Lock()
		s.queue = append(s.queue, l)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// close ends every subscription, and any later one at once. It is
// idempotent.
func (f *Feed) Close() {
	f.mu.Lock()
	f.closed = true
	subs := f.subs
	f.subs = nil
	f.mu.Unlock()
	for s := range subs {
		s.end()
	}
}

// end stops s's goroutine and waits for it.
func (s *sub) end() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *sub) run() {
	defer close(s.done)
	defer close(s.out)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		l := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		select {
		case s.out <- l:
		case <-s.stop:
			return
		}
	}
}
