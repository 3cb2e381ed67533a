package ps

import (
	"errors"
	"fmt"
)

// errCorruptFlag is a bit of msgError's Kind: the error is ErrCorrupt.
// (errPushed is the other.)
const errCorruptFlag uint8 = 2

// corruptError is the error of a corrupt sparse push: ErrCorrupt, and
// ErrBadRequest on the wire.
type corruptError struct{ msg string }

func (e *corruptError) Error() string { return ErrCorrupt.Error() + ": " + e.msg }

func (e *corruptError) Is(target error) bool { return target == ErrCorrupt || target == ErrBadRequest }

// hubCorruptError is a HubError that the hub flagged as ErrCorrupt.
type hubCorruptError struct{ *HubError }

func (e *hubCorruptError) Unwrap() error { return e.HubError }

func (e *hubCorruptError) Is(target error) bool { return target == ErrCorrupt }

// sparseGrad decodes worker w's sparse push m into the dense gradient a
// dense push of the same elements, zeros elsewhere, would carry. A push
// that cannot be decoded fails the key (Table.fail) with an error that
// names it and w: every worker waiting on it hears, and none waits for
// a round that can never complete.
func (c *core) sparseGrad(w int, m *message) ([]float64, error) {
	k, err := c.table.lookup(m.Key, w)
	if err != nil {
		return nil, err
	}
	spec, err := checkSparse(k.cfg, m)
	var idx []int32
	var vals []float64
	if err == nil {
		idx, vals, err = decodeSparse(spec, m.Data, &c.zstd)
	}
	if err != nil {
		err = &corruptError{fmt.Sprintf("key %q from worker %d at clock %d: %v", m.Key, w, m.Clock, err)}
		c.table.fail(m.Key, err)
		return nil, err
	}
	grad := make([]float64, spec.n)
	for j, i := range idx {
		grad[i] = vals[j]
	}
	return grad, nil
}

// checkSparse checks a sparse push's header against its key's
// declaration and returns what its payload must hold.
func checkSparse(cfg KeyConfig, m *message) (sparseSpec, error) {
	s := sparseSpec{method: SparseMethod(m.Code), codec: SparseCodec(m.Kind), dtype: m.DType, n: cfg.Len, k: SparseK(cfg.Len, cfg.Sparse.Ratio)}
	switch {
	case cfg.Sparse.Method == Dense:
		return s, errors.New("a sparse push of a key declared dense")
	case s.method != cfg.Sparse.Method:
		return s, fmt.Errorf("a %v push of a key declared %v", s.method, cfg.Sparse.Method)
	case m.Count != uint64(cfg.Len):
		return s, fmt.Errorf("a push of %d elements for a partition of %d", m.Count, cfg.Len)
	case m.N != uint64(s.k):
		return s, fmt.Errorf("%d elements sent where ratio %v of %d is %d", m.N, cfg.Sparse.Ratio, cfg.Len, s.k)
	}
	if s.method == RandomK {
		s.seed = randomSeed(cfg.Sparse.Seed, m.Key, m.Clock)
	}
	return s, nil
}
