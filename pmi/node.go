package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// KV is one put.
type KV struct{ Key, Value string }

// ErrClosed is returned by Serve and Release once the Node is closed.
var ErrClosed = errors.New("pmi: node closed")

// NodeConfig describes one host's part of a job.
type NodeConfig struct {
	KVS      string // the job's KVS name (get_my_kvsname)
	Size     int    // ranks in the job (PMI_SIZE)
	Universe int    // get_universe_size; 0 means Size
	Local    int    // ranks on this host: a barrier is complete here when all of them entered it
	Mapping  string // PMI_process_mapping ("" leaves the key unset)
	// Relay hands this host's puts of barrier epoch (1, 2, ...) on to the
	// job's Fence, once every local rank entered the barrier. It must not
	// block on Release. An error fails the barrier for every local rank.
	Relay func(epoch int, puts []KV) error
	// Abort is called when a rank asks to abort the job (cmd=abort), before
	// Serve returns. Optional.
	Abort func(rank, code int, msg string)
}

// DefaultNodeConfig is a one-host, one-rank job with no relay: every
// barrier is complete as soon as its one rank enters it.
func DefaultNodeConfig() NodeConfig {
	return NodeConfig{KVS: "kvs_gorun", Size: 1, Local: 1}
}

func (c *NodeConfig) validate() error {
	switch {
	case c.KVS == "" || len(c.KVS) > MaxKVSName:
		return fmt.Errorf("pmi: KVS name of %d bytes: want 1 to %d", len(c.KVS), MaxKVSName)
	case c.Size < 1 || c.Local < 1 || c.Local > c.Size:
		return fmt.Errorf("pmi: %d local ranks of %d: want 1 <= local <= size", c.Local, c.Size)
	case c.Universe < 0:
		return fmt.Errorf("pmi: universe size %d", c.Universe)
	}
	return nil
}

// Node serves one host's ranks. Its methods are safe for concurrent use.
type Node struct {
	cfg NodeConfig

	mu      sync.Mutex
	kvs     map[string]string // released by the fence, and this host's own puts
	pending []KV              // this host's puts since the last barrier
	entered int               // local ranks in the current barrier
	epoch   int               // barriers completed
	release chan struct{}     // closed when the current barrier is released
	failure error             // the current barrier failed
	done    chan struct{}
	closed  bool
}

// NewNode returns a Node for cfg.
func NewNode(cfg NodeConfig) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Universe == 0 {
		cfg.Universe = cfg.Size
	}
	n := &Node{cfg: cfg, kvs: map[string]string{}, release: make(chan struct{}), done: make(chan struct{})}
	if cfg.Mapping != "" {
		n.kvs["PMI_process_mapping"] = cfg.Mapping
	}
	return n, nil
}

// Close wakes every rank waiting in a barrier with ErrClosed. It is
// idempotent.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		close(n.done)
	}
	return nil
}

// Release completes barrier epoch with puts, the puts of every host in
// that epoch: they become visible to every get, and the local ranks in the
// barrier get barrier_out.
func (n *Node) Release(epoch int, puts []KV) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if epoch != n.epoch+1 || n.entered != 0 {
		return fmt.Errorf("pmi: release of barrier %d, but this host is at barrier %d with %d of %d ranks in it", epoch, n.epoch+1, n.entered, n.cfg.Local)
	}
	for _, kv := range puts {
		n.kvs[kv.Key] = kv.Value
	}
	n.epoch++
	close(n.release)
	n.release = make(chan struct{})
	return nil
}

// fail ends the current barrier with err for every local rank in it.
func (n *Node) fail(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failure = err
	close(n.release)
	n.release = make(chan struct{})
}

// barrier enters rank into the current barrier and waits for its release.
func (n *Node) barrier(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	if n.failure != nil {
		err := n.failure
		n.mu.Unlock()
		return err
	}
	ch := n.release
	n.entered++
	var puts []KV
	last := n.entered == n.cfg.Local
	epoch := n.epoch + 1
	if last {
		puts, n.pending, n.entered = n.pending, nil, 0
	}
	n.mu.Unlock()
	if last {
		if n.cfg.Relay == nil {
			if err := n.Release(epoch, nil); err != nil {
				return err
			}
		} else if err := n.cfg.Relay(epoch, puts); err != nil {
			err = fmt.Errorf("pmi: barrier %d: %w", epoch, err)
			n.fail(err)
			return err
		}
	}
	select {
	case <-ch:
	case <-n.done:
		return ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failure
}

func (n *Node) put(key, value string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kvs[key] = value
	n.pending = append(n.pending, KV{key, value})
}

func (n *Node) get(key string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.kvs[key]
	return v, ok
}

// Result is how a rank's session ended.
type Result struct {
	Init, Finalized bool // the rank sent init, finalize
	Aborted         bool // the rank sent abort
	Code            int  // its exit code, if Aborted
	Msg             string
}

// Serve answers the requests of rank on conn until the rank closes it,
// finalizes (its last request), aborts, or ctx ends or the Node closes.
// A line that is not PMI-1, or an unknown command, ends it with an error
// (wrapping ErrMalformed) that names the rank; so does a failed barrier.
func (n *Node) Serve(ctx context.Context, rank int, conn io.ReadWriter) (Result, error) {
	var res Result
	r := bufio.NewReaderSize(conn, MaxLine+2)
	w := func(b []byte) error {
		_, err := conn.Write(b)
		return err
	}
	for {
		line, err := readLine(r)
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("rank %d: %w", rank, err)
		}
		req, err := ParseLine(line)
		if err != nil {
			return res, fmt.Errorf("rank %d: %w", rank, err)
		}
		if req.Multi {
			// mcmd=spawn: its lines run up to "endcmd".
			if err := skipMulti(r, line); err != nil {
				return res, fmt.Errorf("rank %d: in %s: %w", rank, req.Cmd, err)
			}
			if err := w(Format("spawn_result", "rc", "-1", "errmsg", "gorun_does_not_spawn_processes")); err != nil {
				return res, err
			}
			continue
		}
		var out []byte
		switch req.Cmd {
		case "init":
			res.Init = true
			out = initReply(req.Args)
		case "barrier_in":
			if err := n.barrier(ctx); err != nil {
				return res, fmt.Errorf("rank %d: %w", rank, err)
			}
			out = Format("barrier_out")
		case "finalize":
			res.Finalized = true
			return res, w(Format("finalize_ack"))
		case "abort":
			res.abort(req.Args)
			if n.cfg.Abort != nil {
				n.cfg.Abort(rank, res.Code, res.Msg)
			}
			return res, nil
		default:
			var ok bool
			if out, ok = n.reply(req); !ok {
				return res, fmt.Errorf("rank %d: %w: unknown command %q", rank, ErrMalformed, clip(req.Cmd))
			}
		}
		if err := w(out); err != nil {
			return res, err
		}
	}
}

// skipMulti reads the rest of a multi-line request (mcmd=), whose first
// line is line, up to its "endcmd" line.
func skipMulti(r *bufio.Reader, line string) error {
	var err error
	for line != "endcmd" {
		if line, err = readLine(r); err != nil {
			return err
		}
	}
	return nil
}

// initReply answers init: PMI-1.1, or rc=-1 to a client that asks for
// another version.
func initReply(a map[string]string) []byte {
	rc := "0"
	if a["pmi_version"] != "1" {
		rc = "-1" // PMI-2 is another protocol
	}
	return Format("response_to_init", "pmi_version", "1", "pmi_subversion", "1", "rc", rc)
}

// abort records an abort request's exit code and message.
func (res *Result) abort(a map[string]string) {
	res.Aborted = true
	res.Code, _ = strconv.Atoi(a["exitcode"])
	res.Msg = a["msg"]
	if m, ok := a["message"]; ok {
		res.Msg = m // MPICH 4.2
	}
}

// reply answers the requests that neither wait nor end the session: the
// job's constants, the KVS's put and get, and the services gorun refuses
// (name publishing, more KVSs, iteration). false: req.Cmd is none of
// these.
func (n *Node) reply(req Request) ([]byte, bool) {
	a := req.Args
	switch req.Cmd {
	case "get_maxes":
		return Format("maxes", "kvsname_max", strconv.Itoa(MaxKVSName), "keylen_max", strconv.Itoa(MaxKey), "vallen_max", strconv.Itoa(MaxValue)), true
	case "get_appnum":
		return Format("appnum", "appnum", "0"), true
	case "get_my_kvsname":
		return Format("my_kvsname", "kvsname", n.cfg.KVS), true
	case "get_universe_size":
		return Format("universe_size", "size", strconv.Itoa(n.cfg.Universe)), true
	case "put":
		return n.putReply(a), true
	case "get":
		if v, ok := n.get(a["key"]); ok && a["kvsname"] == n.cfg.KVS {
			return Format("get_result", "rc", "0", "msg", "success", "value", v), true
		}
		return Format("get_result", "rc", "-1", "msg", "key_not_found"), true
	case "publish_name":
		return Format("publish_result", "rc", "-1", "msg", "name_service_not_supported"), true
	case "unpublish_name":
		return Format("unpublish_result", "rc", "-1", "msg", "name_service_not_supported"), true
	case "lookup_name":
		return Format("lookup_result", "rc", "-1", "msg", "name_service_not_supported"), true
	case "create_kvs":
		return Format("newkvs", "rc", "-1", "msg", "one_kvs_per_job"), true
	case "destroy_kvs":
		return Format("kvs_destroyed", "rc", "-1", "msg", "one_kvs_per_job"), true
	case "getbyidx":
		return Format("getbyidx_results", "rc", "-1", "reason", "kvs_iteration_not_supported"), true
	}
	return nil, false
}

// putReply stores a put's key and value, unless it names another KVS, its
// key or value is out of bounds, or its key is the reserved
// PMI_process_mapping, and answers it.
func (n *Node) putReply(a map[string]string) []byte {
	k, v := a["key"], a["value"]
	switch {
	case a["kvsname"] != n.cfg.KVS:
		return Format("put_result", "rc", "-1", "msg", "unknown_kvsname")
	case k == "" || len(k) > MaxKey:
		return Format("put_result", "rc", "-1", "msg", fmt.Sprintf("key_of_%d_bytes_(1_to_%d)", len(k), MaxKey))
	case len(v) > MaxValue:
		return Format("put_result", "rc", "-1", "msg", fmt.Sprintf("value_of_%d_bytes_(at_most_%d)", len(v), MaxValue))
	case k == "PMI_process_mapping":
		return Format("put_result", "rc", "-1", "msg", "reserved_key")
	}
	n.put(k, v)
	return Format("put_result", "rc", "0", "msg", "success")
}

// readLine reads one line of at most MaxLine bytes, without its newline.
func readLine(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(b) > MaxLine+1:
		return "", fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, MaxLine)
	case err == io.EOF && len(b) > 0:
		return "", fmt.Errorf("%w: %q ends without a newline", ErrMalformed, clip(string(b)))
	case err != nil:
		return "", err
	}
	return string(b[:len(b)-1]), nil
}
