package pmix

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The buffer format of PMIx's "v41" buffer operations (bfrops), in its
// NON_DESC form: what OpenPMIx 4.1 and later (Open MPI 5's PMIx) pack.
//
//   - Every integer wider than a byte is a "flex" integer: little-endian
//     base-128 groups, the high bit of each byte saying another follows; a
//     ninth byte, if any, holds the last 8 bits whole. Signed integers are
//     zigzag-encoded first (v<<1 for v >= 0, ^v<<1|1 below).
//   - A pack of N values is the count N (a flex int32), then the values.
//   - A string is its length with the NUL (a flex int32; 0 for NULL), then
//     its bytes and the NUL. Floats and doubles travel as "%f" strings.
//   - A value is its data type (a flex uint16), then the data.
//
// Values the server only stores and hands on (what ranks put) are kept as
// raw bytes, so a type need only be measured, never interpreted.

// Type is a PMIx data type (pmix_data_type_t).
type Type uint16

// The data types of the PMIx standard that this package reads or writes.
const (
	TypeUndef        Type = 0
	TypeBool         Type = 1
	TypeByte         Type = 2
	TypeString       Type = 3
	TypeSize         Type = 4
	TypePID          Type = 5
	TypeInt          Type = 6
	TypeInt8         Type = 7
	TypeInt16        Type = 8
	TypeInt32        Type = 9
	TypeInt64        Type = 10
	TypeUint         Type = 11
	TypeUint8        Type = 12
	TypeUint16       Type = 13
	TypeUint32       Type = 14
	TypeUint64       Type = 15
	TypeFloat        Type = 16
	TypeDouble       Type = 17
	TypeTimeval      Type = 18
	TypeTime         Type = 19
	TypeStatus       Type = 20
	TypeValue        Type = 21
	TypeProc         Type = 22
	TypeApp          Type = 23
	TypeInfo         Type = 24
	TypePdata        Type = 25
	TypeBuffer       Type = 26
	TypeByteObject   Type = 27
	TypeKval         Type = 28
	TypePersist      Type = 30
	TypePointer      Type = 31
	TypeScope        Type = 32
	TypeRange        Type = 33
	TypeCommand      Type = 34
	TypeDirectives   Type = 35
	TypeDataType     Type = 36
	TypeProcState    Type = 37
	TypeProcInfo     Type = 38
	TypeDataArray    Type = 39
	TypeProcRank     Type = 40
	TypeQuery        Type = 41
	TypeCompressed   Type = 42
	TypeAllocDir     Type = 43
	TypeIOFChannel   Type = 45
	TypeEnvar        Type = 46
	TypeCoord        Type = 47
	TypeRegattr      Type = 48
	TypeJobState     Type = 50
	TypeLinkState    Type = 51
	TypeGeometry     Type = 53
	TypeDeviceDist   Type = 54
	TypeEndpoint     Type = 55
	TypeDevType      Type = 57
	TypeLocType      Type = 58
	TypeCompressedBO Type = 59
	TypeProcNspace   Type = 60
	TypeDataBuffer   Type = 65
	TypeStorMedium   Type = 66
	TypeStorAccess   Type = 67
	TypeStorPersist  Type = 68
	TypeStorAccType  Type = 69
)

// Limits of what a decoder accepts before it allocates.
const (
	MaxMessage = 64 << 20 // a message from a client, header excluded
	maxCount   = 1 << 20  // values in one pack, elements in one array
	maxDepth   = 16       // values nested in values
	MaxNspace  = 255      // PMIX_MAX_NSLEN
	MaxKey     = 511      // PMIX_MAX_KEYLEN
)

// Rank values with a meaning of their own (pmix_rank_t).
const (
	RankUndef    uint32 = math.MaxUint32
	RankWildcard uint32 = math.MaxUint32 - 1
	RankInvalid  uint32 = math.MaxUint32 - 3
)

// Scopes of a put (pmix_scope_t).
const (
	ScopeUndef  = 0
	ScopeLocal  = 1
	ScopeRemote = 2
	ScopeGlobal = 3
)

// errShort is a read past the end of a buffer, which ends the loops of
// "unpack until the buffer is empty".
var errShort = errors.New("read past the end of the buffer")

// decoder reads a PMIx buffer. Its methods fail on malformed input with
// an error, never a panic, and never allocate more than the input holds.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) empty() bool { return d.off >= len(d.b) }

func (d *decoder) byte1() (byte, error) {
	if d.off >= len(d.b) {
		return 0, errShort
	}
	c := d.b[d.off]
	d.off++
	return c, nil
}

func (d *decoder) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(d.b)-d.off {
		return nil, errShort
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p, nil
}

// flex reads one flex integer.
func (d *decoder) flex() (uint64, error) {
	var v uint64
	for i := 0; i < 9; i++ {
		c, err := d.byte1()
		if err != nil {
			return 0, err
		}
		if i == 8 {
			return v | uint64(c)<<56, nil
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return v, nil // not reached
}

func (d *decoder) uint(bits int) (uint64, error) {
	v, err := d.flex()
	if err != nil {
		return 0, err
	}
	if bits < 64 && v>>bits != 0 {
		return 0, fmt.Errorf("flex integer %d does not fit %d bits", v, bits)
	}
	return v, nil
}

func (d *decoder) int(bits int) (int64, error) {
	z, err := d.flex()
	if err != nil {
		return 0, err
	}
	v := int64(z >> 1)
	if z&1 != 0 {
		v = ^v
	}
	if bits < 64 && (v < -1<<(bits-1) || v >= 1<<(bits-1)) {
		return 0, fmt.Errorf("flex integer %d does not fit %d bits", v, bits)
	}
	return v, nil
}

func (d *decoder) int32() (int32, error) {
	v, err := d.int(32)
	return int32(v), err
}

func (d *decoder) uint32() (uint32, error) {
	v, err := d.uint(32)
	return uint32(v), err
}

func (d *decoder) uint16() (uint16, error) {
	v, err := d.uint(16)
	return uint16(v), err
}

func (d *decoder) size() (int, error) {
	v, err := d.uint(64)
	if err != nil {
		return 0, err
	}
	if v > uint64(len(d.b)-d.off) && v > maxCount {
		return 0, fmt.Errorf("size %d larger than the buffer", v)
	}
	return int(v), nil
}

// count reads a pack's count and checks it against want (0: any, up to
// maxCount).
func (d *decoder) count(want int) (int, error) {
	n, err := d.int32()
	if err != nil {
		return 0, err
	}
	switch {
	case n < 0 || n > maxCount:
		return 0, fmt.Errorf("pack of %d values", n)
	case want > 0 && int(n) != want:
		return 0, fmt.Errorf("pack of %d values where %d were expected", n, want)
	}
	return int(n), nil
}

// str reads a string's body (no count).
func (d *decoder) str() (string, error) {
	n, err := d.int32()
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	if n < 0 {
		return "", fmt.Errorf("string of %d bytes", n)
	}
	p, err := d.bytes(int(n))
	if err != nil {
		return "", err
	}
	if p[len(p)-1] != 0 {
		return "", errors.New("string without its NUL")
	}
	return string(p[:len(p)-1]), nil
}

// Packed readers: one pack (count then value) of one value.

func (d *decoder) packedByte() (byte, error) {
	if _, err := d.count(1); err != nil {
		return 0, err
	}
	return d.byte1()
}

func (d *decoder) packedString() (string, error) {
	if _, err := d.count(1); err != nil {
		return "", err
	}
	return d.str()
}

func (d *decoder) packedSize() (int, error) {
	if _, err := d.count(1); err != nil {
		return 0, err
	}
	return d.size()
}

func (d *decoder) packedInt32() (int32, error) {
	if _, err := d.count(1); err != nil {
		return 0, err
	}
	return d.int32()
}

func (d *decoder) packedUint32() (uint32, error) {
	if _, err := d.count(1); err != nil {
		return 0, err
	}
	return d.uint32()
}

// Proc is a process's name (pmix_proc_t).
type Proc struct {
	Nspace string
	Rank   uint32
}

func (d *decoder) proc() (Proc, error) {
	ns, err := d.str()
	if err != nil {
		return Proc{}, err
	}
	if len(ns) > MaxNspace {
		return Proc{}, fmt.Errorf("namespace of %d bytes", len(ns))
	}
	r, err := d.uint32()
	return Proc{ns, r}, err
}

// Value is a typed value. Raw is its data as packed, without the type:
// the server hands values on as it got them.
type Value struct {
	Type Type
	Raw  []byte
}

// Info is a key and a value (pmix_info_t; the directives are kept too).
type Info struct {
	Key   string
	Flags uint32
	Value Value
}

// value reads a type and the data of that type.
func (d *decoder) value(depth int) (Value, error) {
	t, err := d.uint16()
	if err != nil {
		return Value{}, err
	}
	start := d.off
	if err := d.skip(Type(t), 1, depth+1); err != nil {
		return Value{}, err
	}
	return Value{Type(t), d.b[start:d.off:d.off]}, nil
}

func (d *decoder) key() (string, error) {
	k, err := d.str()
	if err == nil && len(k) > MaxKey {
		err = fmt.Errorf("key of %d bytes", len(k))
	}
	return k, err
}

func (d *decoder) info(depth int) (Info, error) {
	k, err := d.key()
	if err != nil {
		return Info{}, err
	}
	flags, err := d.uint32()
	if err != nil {
		return Info{}, err
	}
	v, err := d.value(depth)
	return Info{k, flags, v}, err
}

// kval reads a key and a value (pmix_kval_t).
func (d *decoder) kval() (Info, error) {
	k, err := d.key()
	if err != nil {
		return Info{}, err
	}
	v, err := d.value(0)
	return Info{Key: k, Value: v}, err
}

// infos reads a pack of n infos (n read before, as a size).
func (d *decoder) infos(n int) ([]Info, error) {
	if n == 0 {
		return nil, nil
	}
	if n > maxCount {
		return nil, fmt.Errorf("%d infos", n)
	}
	if _, err := d.count(n); err != nil {
		return nil, err
	}
	var out []Info
	for i := 0; i < n; i++ {
		in, err := d.info(0)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// skip reads n values of type t without keeping them.
func (d *decoder) skip(t Type, n int, depth int) error {
	if depth > maxDepth {
		return errors.New("values nested too deep")
	}
	if n < 0 || n > maxCount {
		return fmt.Errorf("%d values", n)
	}
	if t == TypePID && n > 0 {
		// OpenPMIx (bfrops base pack_pid) describes pid_t's width once
		// per pack, then packs the n pids.
		if _, err := d.flex(); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if _, err := d.flex(); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; i < n; i++ {
		if err := d.skip1(t, depth); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) skip1(t Type, depth int) error {
	var err error
	switch t {
	case TypeUndef:
	case TypeBool, TypeByte, TypeInt8, TypeUint8, TypePersist, TypePointer, TypeScope,
		TypeRange, TypeCommand, TypeProcState, TypeAllocDir, TypeJobState, TypeLinkState:
		_, err = d.byte1()
	case TypeSize, TypeInt, TypeInt16, TypeInt32, TypeInt64, TypeUint, TypeUint16, TypeUint32,
		TypeUint64, TypeTime, TypeStatus, TypeDirectives, TypeDataType, TypeProcRank,
		TypeIOFChannel, TypeDevType, TypeLocType, TypeStorMedium, TypeStorAccess,
		TypeStorPersist, TypeStorAccType:
		_, err = d.flex()
	case TypePID:
		if _, err = d.flex(); err == nil { // the width's type, then the pid
			_, err = d.flex()
		}
	case TypeTimeval:
		if _, err = d.flex(); err == nil {
			_, err = d.flex()
		}
	case TypeString, TypeFloat, TypeDouble, TypeProcNspace:
		_, err = d.str()
	case TypeByteObject, TypeCompressed, TypeCompressedBO, TypeDataBuffer:
		var n int
		if n, err = d.size(); err == nil {
			_, err = d.bytes(n)
		}
	case TypeBuffer:
		var n int
		if _, err = d.byte1(); err == nil {
			if n, err = d.size(); err == nil {
				_, err = d.bytes(n)
			}
		}
	case TypeProc:
		_, err = d.proc()
	case TypeValue:
		_, err = d.value(depth)
	case TypeInfo:
		_, err = d.info(depth)
	case TypeKval:
		if _, err = d.key(); err == nil {
			_, err = d.value(depth)
		}
	case TypePdata:
		if _, err = d.proc(); err == nil {
			if _, err = d.key(); err == nil {
				_, err = d.value(depth)
			}
		}
	case TypeDataArray:
		var at uint16
		var n int
		if at, err = d.uint16(); err != nil {
			return err
		}
		if n, err = d.size(); err != nil {
			return err
		}
		if n > 0 && at != uint16(TypeUndef) {
			err = d.skip(Type(at), n, depth+1)
		}
	case TypeProcInfo:
		if _, err = d.proc(); err == nil {
			if _, err = d.str(); err == nil {
				if _, err = d.str(); err == nil {
					if err = d.skip1(TypePID, depth); err == nil {
						_, err = d.byte1()
					}
				}
			}
		}
	case TypeEnvar:
		if _, err = d.str(); err == nil {
			if _, err = d.str(); err == nil {
				_, err = d.byte1()
			}
		}
	case TypeCoord:
		var n int
		if _, err = d.byte1(); err == nil {
			if n, err = d.size(); err == nil {
				err = d.skip(TypeUint32, n, depth+1)
			}
		}
	case TypeEndpoint:
		var n int
		if _, err = d.str(); err == nil {
			if _, err = d.str(); err == nil {
				if n, err = d.size(); err == nil {
					_, err = d.bytes(n)
				}
			}
		}
	case TypeDeviceDist:
		if _, err = d.str(); err == nil {
			if _, err = d.str(); err == nil {
				if _, err = d.flex(); err == nil {
					if _, err = d.flex(); err == nil {
						_, err = d.flex()
					}
				}
			}
		}
	case TypeGeometry:
		var n int
		if _, err = d.size(); err == nil {
			if _, err = d.str(); err == nil {
				if _, err = d.str(); err == nil {
					if n, err = d.size(); err == nil {
						err = d.skip(TypeCoord, n, depth+1)
					}
				}
			}
		}
	case TypeRegattr:
		var n int32
		if _, err = d.str(); err == nil {
			if _, err = d.str(); err == nil {
				if _, err = d.uint16(); err == nil {
					if n, err = d.int32(); err == nil {
						err = d.skip(TypeString, int(n), depth+1)
					}
				}
			}
		}
	case TypeQuery:
		var nk int32
		var nq int
		if nk, err = d.int32(); err != nil {
			return err
		}
		if err = d.skip(TypeString, int(nk), depth+1); err != nil {
			return err
		}
		if nq, err = d.size(); err == nil {
			err = d.skip(TypeInfo, nq, depth+1)
		}
	case TypeApp:
		var n int32
		var ni int
		if _, err = d.str(); err != nil { // cmd
			return err
		}
		if n, err = d.int32(); err != nil { // argv (packed as a generic int)
			return err
		}
		if err = d.skip(TypeString, int(n), depth+1); err != nil {
			return err
		}
		if n, err = d.int32(); err != nil { // env
			return err
		}
		if err = d.skip(TypeString, int(n), depth+1); err != nil {
			return err
		}
		if _, err = d.str(); err != nil { // cwd
			return err
		}
		if _, err = d.int32(); err != nil { // maxprocs
			return err
		}
		if ni, err = d.size(); err == nil {
			err = d.skip(TypeInfo, ni, depth+1)
		}
	default:
		return fmt.Errorf("data type %d is not supported", t)
	}
	return err
}

// encoder builds a PMIx buffer.
type encoder struct{ b []byte }

func (e *encoder) flex(v uint64) {
	for i := 0; i < 8; i++ {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		e.b = append(e.b, c)
		if v == 0 {
			return
		}
	}
	e.b = append(e.b, byte(v))
}

func (e *encoder) int(v int64) {
	z := uint64(v) << 1
	if v < 0 {
		z = uint64(^v)<<1 | 1
	}
	e.flex(z)
}

func (e *encoder) str(s string) {
	if s == "" {
		e.int(0)
		return
	}
	e.int(int64(len(s) + 1))
	e.b = append(e.b, s...)
	e.b = append(e.b, 0)
}

func (e *encoder) count(n int) { e.int(int64(n)) }

func (e *encoder) packedByte(c byte)      { e.count(1); e.b = append(e.b, c) }
func (e *encoder) packedString(s string)  { e.count(1); e.str(s) }
func (e *encoder) packedStatus(st Status) { e.count(1); e.int(int64(st)) }

func (e *encoder) proc(p Proc) { e.str(p.Nspace); e.flex(uint64(p.Rank)) }

func (e *encoder) value(v Value) {
	e.flex(uint64(v.Type))
	e.b = append(e.b, v.Raw...)
}

// kval packs one key and value as one pack.
func (e *encoder) kval(key string, v Value) {
	e.count(1)
	e.str(key)
	e.value(v)
}

func (e *encoder) info(in Info) {
	e.str(in.Key)
	e.flex(uint64(in.Flags))
	e.value(in.Value)
}

// Values the server makes.

func raw(f func(e *encoder)) []byte {
	var e encoder
	f(&e)
	return e.b
}

// String is a PMIX_STRING value.
func String(s string) Value { return Value{TypeString, raw(func(e *encoder) { e.str(s) })} }

// Uint32 is a PMIX_UINT32 value.
func Uint32(v uint32) Value { return Value{TypeUint32, raw(func(e *encoder) { e.flex(uint64(v)) })} }

// Uint16 is a PMIX_UINT16 value.
func Uint16(v uint16) Value { return Value{TypeUint16, raw(func(e *encoder) { e.flex(uint64(v)) })} }

// Rank is a PMIX_PROC_RANK value.
func Rank(v uint32) Value { return Value{TypeProcRank, raw(func(e *encoder) { e.flex(uint64(v)) })} }

// Bool is a PMIX_BOOL value.
func Bool(v bool) Value {
	c := byte(0)
	if v {
		c = 1
	}
	return Value{TypeBool, []byte{c}}
}

// InfoArray is a PMIX_DATA_ARRAY of PMIX_INFO.
func InfoArray(infos []Info) Value {
	return Value{TypeDataArray, raw(func(e *encoder) {
		e.flex(uint64(TypeInfo))
		e.flex(uint64(len(infos)))
		for _, in := range infos {
			e.info(in)
		}
	})}
}

// Values the server reads.

// asUint reads an unsigned integer value of any width.
func (v Value) asUint() (uint64, bool) {
	d := decoder{b: v.Raw}
	switch v.Type {
	case TypeUint8, TypeByte, TypeBool:
		c, err := d.byte1()
		return uint64(c), err == nil
	case TypeUint16, TypeUint32, TypeUint64, TypeSize, TypeUint, TypeProcRank:
		x, err := d.flex()
		return x, err == nil
	case TypeInt, TypeInt16, TypeInt32, TypeInt64:
		x, err := d.int(64)
		return uint64(x), err == nil && x >= 0
	}
	return 0, false
}

// asBool reads a boolean: a PMIX_BOOL, or an info with no value (which
// PMIx reads as true).
func (v Value) asBool() bool {
	if v.Type == TypeUndef {
		return true
	}
	x, ok := v.asUint()
	return ok && x != 0
}

// asString reads a string value.
func (v Value) asString() (string, bool) {
	if v.Type != TypeString {
		return "", false
	}
	d := decoder{b: v.Raw}
	s, err := d.str()
	return s, err == nil
}

// Status is a PMIx status (pmix_status_t).
type Status int32

// The statuses this package sends.
const (
	StatusSuccess      Status = 0
	StatusError        Status = -1
	StatusInvalidCred  Status = -12
	StatusTimeout      Status = -24
	StatusBadParam     Status = -27
	StatusNotFound     Status = -46
	StatusNotSupported Status = -47
	StatusLostConn     Status = -61
)

func (s Status) String() string {
	switch s {
	case StatusSuccess:
		return "PMIX_SUCCESS"
	case StatusError:
		return "PMIX_ERROR"
	case StatusInvalidCred:
		return "PMIX_ERR_INVALID_CRED"
	case StatusTimeout:
		return "PMIX_ERR_TIMEOUT"
	case StatusBadParam:
		return "PMIX_ERR_BAD_PARAM"
	case StatusNotFound:
		return "PMIX_ERR_NOT_FOUND"
	case StatusNotSupported:
		return "PMIX_ERR_NOT_SUPPORTED"
	case StatusLostConn:
		return "PMIX_ERR_LOST_CONNECTION"
	}
	return "PMIx status " + strconv.Itoa(int(s))
}
