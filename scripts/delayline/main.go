// Command delayline delays every packet of an NFQUEUE queue by a fixed
// time: the test hosts' delay shaping (scripts/testhosts.sh up --delay),
// for a kernel without netem. It runs inside a host's network namespace
// beside an iptables rule that queues the packets the host receives:
//
//	iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0
//	delayline -queue 0 -delay 10ms
//
// On the receiving side, not the sending one: a packet held on its way out
// still counts against its socket's small-queue budget, and TCP then sends
// about two packets per delay (1 MB/s at 5 ms); a received packet belongs
// to no socket yet (5 ms here: 430 MB/s, against 2 GB/s undelayed).
//
// Packets reach it as metadata only (whole GSO packets, no payload), wait
// in arrival order, and are let go in batches (one verdict accepts every
// packet up to an id) once their time has come. Packets beyond the queue's
// length are dropped by the kernel, as a full link queue would.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Netlink and nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	subsysQueue    = 3
	msgPacket      = 0
	msgVerdictBat  = 3
	msgConfig      = 2
	attrPacketHdr  = 1
	attrVerdictHdr = 2
	cfgCmd         = 1
	cfgParams      = 2
	cfgQueueMaxlen = 3
	cfgMask        = 4
	cfgFlags       = 5
	cmdBind        = 1
	copyMeta       = 1
	flagGSO        = 4
	nfAccept       = 1
)

func main() {
	queue := flag.Uint("queue", 0, "the NFQUEUE queue number")
	delay := flag.Duration("delay", 10*time.Millisecond, "each packet's delay")
	maxlen := flag.Uint("maxlen", 65536, "packets the kernel holds before it drops")
	flag.Parse()
	if *delay <= 0 || *queue > 65535 {
		fmt.Fprintln(os.Stderr, "delayline: want -delay > 0 and -queue 0..65535")
		os.Exit(2)
	}
	if err := run(uint16(*queue), *delay, uint32(*maxlen)); err != nil {
		fmt.Fprintln(os.Stderr, "delayline:", err)
		os.Exit(1)
	}
}

func run(queue uint16, delay time.Duration, maxlen uint32) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	// A lost notification is harmless: the next batch verdict lets its
	// packet go too.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	for _, m := range [][]attr{
		{{cfgCmd, []byte{cmdBind, 0, 0, 0}}},
		{{cfgParams, append(be32(0), copyMeta)}, {cfgQueueMaxlen, be32(maxlen)}, {cfgFlags, be32(flagGSO)}, {cfgMask, be32(flagGSO)}},
	} {
		if err := send(fd, msgConfig, queue, unix.NLM_F_ACK, m); err != nil {
			return fmt.Errorf("configuring queue %d: %w", queue, err)
		}
		if err := ack(fd); err != nil {
			return fmt.Errorf("configuring queue %d: %w", queue, err)
		}
	}
	arrivals := make(chan arrival, 1<<16)
	errc := make(chan error, 2)
	go func() { errc <- receive(fd, arrivals) }()
	go func() { errc <- release(fd, queue, delay, arrivals) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		return err
	case <-sig:
		return nil // the kernel lets the queue's packets go with the socket
	}
}

// arrival is one queued packet.
type arrival struct {
	id uint32
	at time.Time
}

// receive reads the queue's packet notifications.
func receive(fd int, out chan<- arrival) error {
	buf := make([]byte, 1<<20)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
			continue
		}
		if err != nil {
			return err
		}
		now := time.Now()
		for _, m := range messages(buf[:n]) {
			if m.typ != subsysQueue<<8|msgPacket {
				continue
			}
			for _, a := range attrs(m.body) {
				if a.typ == attrPacketHdr && len(a.data) >= 4 {
					out <- arrival{binary.BigEndian.Uint32(a.data), now}
				}
			}
		}
	}
}

// release lets packets go in arrival order once delay has passed: one
// batch verdict for every packet that is due.
func release(fd int, queue uint16, delay time.Duration, in <-chan arrival) error {
	for a := range in {
		if wait := time.Until(a.at.Add(delay)); wait > 0 {
			time.Sleep(wait)
		}
		last := a.id
	more: // every packet that is due by now goes in the same verdict
		for {
			select {
			case b := <-in:
				if wait := time.Until(b.at.Add(delay)); wait > 0 {
					if err := verdict(fd, queue, last); err != nil {
						return err
					}
					time.Sleep(wait)
				}
				last = b.id
			default:
				break more
			}
		}
		if err := verdict(fd, queue, last); err != nil {
			return err
		}
	}
	return nil
}

// verdict accepts every queued packet up to id.
func verdict(fd int, queue uint16, id uint32) error {
	hdr := binary.BigEndian.AppendUint32(nil, nfAccept)
	hdr = binary.BigEndian.AppendUint32(hdr, id)
	return send(fd, msgVerdictBat, queue, 0, []attr{{attrVerdictHdr, hdr}})
}

type attr struct {
	typ  uint16
	data []byte
}

type message struct {
	typ  uint16
	body []byte // after the nfgenmsg header
}

// send writes one nfnetlink_queue message.
func send(fd int, msg uint8, queue uint16, flags uint16, as []attr) error {
	return unix.Sendto(fd, encode(subsysQueue<<8|uint16(msg), unix.NLM_F_REQUEST|flags, queue, as), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// encode is one nfnetlink message of type typ: the netlink header, the
// nfgenmsg header (for queue) and the attributes, each padded to 4 bytes.
func encode(typ, flags, queue uint16, as []attr) []byte {
	b := make([]byte, 16, 64)
	b = append(b, unix.AF_UNSPEC, 0 /* NFNETLINK_V0 */, byte(queue>>8), byte(queue))
	for _, a := range as {
		b = binary.LittleEndian.AppendUint16(b, uint16(4+len(a.data)))
		b = binary.LittleEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
	binary.LittleEndian.PutUint16(b[4:], typ)
	binary.LittleEndian.PutUint16(b[6:], flags)
	return b
}

// ack reads the kernel's answer to a request sent with NLM_F_ACK.
func ack(fd int) error {
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	b := buf[:n]
	if len(b) < 20 || binary.LittleEndian.Uint16(b[4:]) != unix.NLMSG_ERROR {
		return errors.New("no acknowledgement from the kernel")
	}
	if code := int32(binary.LittleEndian.Uint32(b[16:])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}

// messages splits a netlink datagram into its nfnetlink messages.
func messages(b []byte) []message {
	var out []message
	for len(b) >= 16 {
		n := int(binary.LittleEndian.Uint32(b))
		if n < 16 || n > len(b) {
			break
		}
		if n >= 20 {
			out = append(out, message{binary.LittleEndian.Uint16(b[4:]), b[20:n]})
		}
		b = b[min(len(b), (n+3)&^3):]
	}
	return out
}

// attrs splits a message body into its attributes.
func attrs(b []byte) []attr {
	var out []attr
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint16(b))
		if n < 4 || n > len(b) {
			break
		}
		out = append(out, attr{binary.LittleEndian.Uint16(b[2:]) & 0x3fff, b[4:n]})
		b = b[min(len(b), (n+3)&^3):]
	}
	return out
}
