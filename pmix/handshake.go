package pmix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The connection handshake. A client connects to the port of
// PMIX_SERVER_URI41 and sends a header (the 16 bytes of pmix_ptl_hdr_t
// in the client's byte order, little-endian here) and a body:
//
//	psec module name, NUL-terminated
//	credential length (big-endian uint32) and credential
//	process type flag (1 byte); for a simple client, its namespace
//	  (NUL-terminated) and rank (big-endian uint32)
//	PMIx version, bfrops module and buffer type (1 byte), gds module
//	optional packed info, ignored here
//
// The server answers a big-endian status and, on success, the client's
// index (big-endian uint32). Every later message has a big-endian header.

// hdrLen is the size of pmix_ptl_hdr_t on a 64-bit machine.
const hdrLen = 16

// MaxHello caps a handshake's body, as OpenPMIx does (PMIX_MAX_CRED_SIZE).
const MaxHello = 128 << 10

// Process type flags of the handshake.
const (
	flagSimpleClient    = 0
	flagSingletonClient = 9
)

// Hello is a client's handshake.
type Hello struct {
	Psec    string // security module: native or none
	Cred    []byte // native: the client's effective uid and gid
	Flag    byte   // process type
	Proc    Proc   // who the client says it is
	Version string // the client's PMIx version, e.g. 5.0.7
	Bfrops  string // its buffer operations, v41 for PMIx 4.1 and later
	BufType byte   // 1 NON_DESC, 2 FULLY_DESC
	GDS     string // how it stores job data: hash
}

// ServedVersions says which clients this server speaks to, in the words
// of its refusals.
const ServedVersions = "PMIx 4.1 to 5.x clients (bfrops v41, gds hash, psec native or none): OpenPMIx 4.1, 4.2 and 5.0, as Open MPI 5 and Debian 12 and 13 ship them"

// helloLen reads the body length from a handshake header.
func helloLen(hdr []byte) (int, error) {
	if len(hdr) != hdrLen {
		return 0, fmt.Errorf("pmix: handshake header of %d bytes", len(hdr))
	}
	n := binary.LittleEndian.Uint32(hdr[8:12])
	if n > MaxHello {
		return 0, fmt.Errorf("pmix: handshake of %d bytes, more than the %d allowed", n, MaxHello)
	}
	return int(n), nil
}

// ParseHello decodes a handshake body.
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	p := b
	cstr := func(what string) (string, error) {
		i := 0
		for i < len(p) && p[i] != 0 {
			i++
		}
		if i == len(p) {
			return "", fmt.Errorf("pmix: handshake ends inside its %s", what)
		}
		s := string(p[:i])
		p = p[i+1:]
		return s, nil
	}
	u32 := func(what string) (uint32, error) {
		if len(p) < 4 {
			return 0, fmt.Errorf("pmix: handshake ends inside its %s", what)
		}
		v := binary.BigEndian.Uint32(p)
		p = p[4:]
		return v, nil
	}
	var err error
	if h.Psec, err = cstr("security module"); err != nil {
		return h, err
	}
	n, err := u32("credential length")
	if err != nil {
		return h, err
	}
	if int64(n) > int64(len(p)) {
		return h, fmt.Errorf("pmix: handshake credential of %d bytes in %d", n, len(p))
	}
	h.Cred, p = p[:n:n], p[n:]
	if len(p) < 1 {
		return h, errors.New("pmix: handshake ends before its process type")
	}
	h.Flag, p = p[0], p[1:]
	switch h.Flag {
	case flagSimpleClient:
		if h.Proc.Nspace, err = cstr("namespace"); err != nil {
			return h, err
		}
		if len(h.Proc.Nspace) > MaxNspace {
			return h, fmt.Errorf("pmix: handshake namespace of %d bytes", len(h.Proc.Nspace))
		}
		if h.Proc.Rank, err = u32("rank"); err != nil {
			return h, err
		}
	default:
		// Tools, launchers, schedulers and singletons: the server
		// refuses them (see check), so their identity is not read.
		return h, nil
	}
	if h.Version, err = cstr("version"); err != nil {
		return h, err
	}
	if h.Bfrops, err = cstr("bfrops module"); err != nil {
		// A PMIx 2.0 client ends its handshake with its version.
		return h, nil
	}
	if len(p) < 1 {
		return h, errors.New("pmix: handshake ends before its buffer type")
	}
	h.BufType, p = p[0], p[1:]
	if h.GDS, err = cstr("gds module"); err != nil {
		return h, err
	}
	return h, nil
}

// versionOK reports whether v, "major.minor.release[suffix]", is 4.1 or
// later and before 6.
func versionOK(v string) bool {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(f[0])
	minor, err2 := strconv.Atoi(leadingDigits(f[1]))
	if err1 != nil || err2 != nil {
		return false
	}
	return (major == 4 && minor >= 1) || major == 5
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// check says why a client is not served, or returns nil: the pinned
// protocol (version, bfrops, buffer type, gds), a simple client, and a
// credential of this server's user.
func (h Hello) check(uid, gid uint32) (Status, error) {
	switch {
	case h.Flag == flagSingletonClient:
		return StatusNotSupported, errors.New("pmix: a singleton PMIx client (PMIX_NAMESPACE unset) connected; gorun's ranks are never singletons")
	case h.Flag != flagSimpleClient:
		return StatusNotSupported, fmt.Errorf("pmix: a PMIx tool, launcher or scheduler (process type %d) connected: gorun serves its ranks only", h.Flag)
	case !versionOK(h.Version) || h.Bfrops != "v41":
		return StatusNotSupported, fmt.Errorf("pmix: a PMIx %s client (bfrops %q) connected: gorun serves %s", h.Version, h.Bfrops, ServedVersions)
	case h.BufType != 1:
		return StatusNotSupported, fmt.Errorf("pmix: the client packs fully described buffers (buffer type %d; PMIX_BFROP_BUFFER_TYPE): gorun serves NON_DESC buffers only", h.BufType)
	case h.GDS != "hash":
		return StatusNotSupported, fmt.Errorf("pmix: the client asks for job data through gds %q: gorun serves gds hash only (PMIX_GDS_MODULE=hash)", h.GDS)
	}
	switch h.Psec {
	case "none":
	case "native":
		if len(h.Cred) != 8 {
			return StatusInvalidCred, fmt.Errorf("pmix: native credential of %d bytes, want 8 (uid and gid)", len(h.Cred))
		}
		cu, cg := binary.LittleEndian.Uint32(h.Cred[:4]), binary.LittleEndian.Uint32(h.Cred[4:])
		if cu != uid || cg != gid {
			return StatusInvalidCred, fmt.Errorf("pmix: client of uid %d gid %d, but the job runs as uid %d gid %d", cu, cg, uid, gid)
		}
	default:
		return StatusNotSupported, fmt.Errorf("pmix: the client's security module %q is not served (native or none)", h.Psec)
	}
	return StatusSuccess, nil
}

// reply is the server's answer to a handshake.
func helloReply(st Status, index uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(st))
	if st == StatusSuccess {
		b = binary.BigEndian.AppendUint32(b, index)
	}
	return b
}
