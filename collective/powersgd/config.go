package powersgd

import (
	"errors"
	"fmt"
)

// Config sets up a Compressor. Start from DefaultConfig and change what
// you need. Every rank of a job must use the same Config.
type Config struct {
	// Rank is the rank of the approximation: a rows x cols gradient is
	// sent as (rows+cols)·Rank floats instead of rows·cols. A matrix
	// whose smaller side is below Rank uses that side instead. Higher is
	// closer to plain averaging and sends more; Vogels et al. train
	// ResNet-18 on CIFAR-10 to full accuracy at rank 2 (PyTorch's hook
	// defaults to 1). At least 1.
	Rank int
	// WarmStart keeps each gradient's Q from one call to the next, so the
	// single power iteration per call refines the previous one; without
	// it every call starts from a fresh random Q.
	WarmStart bool
	// ErrorFeedback keeps, per gradient and per rank, what the
	// approximation left out (the residual) and adds it to the next
	// gradient of the same key, so nothing is lost for good: the sum of
	// what was applied tracks the sum of the true averages.
	ErrorFeedback bool
	// MinCompressionRate: a matrix is compressed only when rows·cols is
	// at least this many times (rows+cols)·rank; smaller ones (and every
	// vector, for a rate of 1 or more) go dense, as a plain averaging
	// all-reduce. 0 compresses every matrix with both sides at least 1.
	MinCompressionRate float64
	// Seed is the seed of the random initial Qs. It must be the same on
	// every rank, so that every rank starts from the same Q.
	Seed uint64
}

// DefaultConfig is rank 2, warm start and error feedback on, a minimum
// compression rate of 2 (PyTorch's default) and seed 0.
func DefaultConfig() Config {
	return Config{Rank: 2, WarmStart: true, ErrorFeedback: true, MinCompressionRate: 2}
}

func (c *Config) validate() error {
	var errs []error
	if c.Rank < 1 {
		errs = append(errs, fmt.Errorf("powersgd: Rank %d: must be at least 1", c.Rank))
	}
	if !(c.MinCompressionRate >= 0) { // also rejects NaN
		errs = append(errs, fmt.Errorf("powersgd: MinCompressionRate %v: must be at least 0", c.MinCompressionRate))
	}
	return errors.Join(errs...)
}
