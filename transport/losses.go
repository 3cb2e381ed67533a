package transport

import "sync"

// Loss is a peer a transport found lost: its rank, and why (the reason
// its PeerLostError gives, as Lost says it).
type Loss struct {
	Rank   int
	Reason string
}

// lossFeed tells its subscribers (Transport.Losses) of each loss its
// transport finds. The owner publishes a loss and takes a subscriber's
// snapshot of Lost under the one lock that guards its record of losses,
// so that between its snapshot and its channel a subscriber sees every
// loss once. Each subscriber has a queue of its own: publishing never
// waits for a subscriber that is slow to read.
type lossFeed struct {
	mu     sync.Mutex
	subs   map[*lossSub]struct{}
	closed bool
}

// lossSub is one subscription: its queue, and the goroutine that hands
// the queue to out.
type lossSub struct {
	mu    sync.Mutex
	queue []Loss
	wake  chan struct{} // a loss was queued (capacity 1)
	out   chan Loss
	stop  chan struct{} // closed to end it
	once  sync.Once
	done  chan struct{} // closed when its goroutine returned
}

// subscribe returns a channel of the losses published from now on, and a
// function that ends the subscription (closing the channel; losses not
// yet received are dropped) and waits for its goroutine. A feed that is
// closed gives a closed channel.
func (f *lossFeed) subscribe() (<-chan Loss, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		ch := make(chan Loss)
		close(ch)
		return ch, func() {}
	}
	s := &lossSub{wake: make(chan struct{}, 1), out: make(chan Loss), stop: make(chan struct{}), done: make(chan struct{})}
	if f.subs == nil {
		f.subs = map[*lossSub]struct{}{}
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
func (f *lossFeed) publish(l Loss) {
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
func (f *lossFeed) close() {
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
func (s *lossSub) end() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *lossSub) run() {
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
