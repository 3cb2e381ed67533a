// Package powersgd averages 2-D float32 gradients over the ranks of a
// collective.Comm by low-rank approximation: PowerSGD (Vogels, Karimireddy
// and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
// Distributed Optimization", NeurIPS 2019), the design of PyTorch's
// powerSGD_hook, over collective.AllReduce.
//
// # What it does
//
// For a rows x cols gradient M (plus, with error feedback, what earlier
// calls left out) and a rank r, one call is one step of power iteration:
//
//	P = M Q              all-reduced (Sum), then orthonormalized
//	Q = Mᵀ P             all-reduced (Sum)
//	M' = P Qᵀ / N        the new gradient, the same bits on every rank
//	residual = M − M'    kept per rank (error feedback)
//
// so each rank sends (rows+cols)·r floats instead of rows·cols: 64 times
// less for a 1024 x 1024 matrix at rank 8, 128 times at rank 4. Q is kept
// for the next call of the same gradient (warm start), so the
// approximation follows the gradient's main directions from step to
// step; the first Q is drawn from Config.Seed, the same on every rank.
// M' is the average of the ranks' M projected on the r directions of P:
// exact when the average has rank at most r, and the error feedback
// returns the rest in later steps, so the sum of applied updates tracks
// the sum of true averages. Vectors (biases, norms) and matrices too
// small to gain (Config.MinCompressionRate) are averaged exactly, as by
// collective.AllReduce with Avg. A convolution's weight goes in as a
// matrix of out-channels x (in-channels · kernel size), as PyTorch does.
//
// # When it pays
//
// Compression trades computation (three products of the gradient with a
// thin matrix, about 6·rows·cols·r flops, and orthonormalizing the rows x r
// P, about 4·rows·r² flops)
// and two latency-bound all-reduces for bandwidth. It pays on slow links
// (Ethernet between hosts, 1–25 Gbit/s) with large matrices (fully
// connected and convolution layers of millions of parameters); within a
// host, on shared memory or NVLink, plain averaging is usually faster.
// The approximation changes the optimization: start with plain averaging
// for the first steps (PyTorch's start_powerSGD_iter) and check the
// accuracy reached. Compressor.Stats counts the bytes sent against plain
// averaging.
//
// AllReduceBatch does the same for many gradients at once, as PyTorch's
// hook does per bucket: the dense ones in one all-reduce, every P in one,
// every Q in one, so a model with many layers pays three all-reduce
// latencies per step instead of two per layer.
//
// # Call order across ranks
//
// Make one Compressor per job on every rank, with the same Config, and
// call AllReduce (or AllReduceBatch) on every rank with the same keys,
// shapes and order (and the same batches); like
// any collective, each call takes its place in the Comm's order, so do
// not issue other collectives on the same Comm from another goroutine
// meanwhile. A key keeps its shape: a different one fails with
// ErrShapeChanged before anything is sent, until Forget(key) is called
// (on every rank). Ranks that disagree on a shape get
// collective.ErrSizeMismatch instead of a hang in most cases (see
// AllReduce for the ones that cannot be told apart).
//
// # Buffers
//
// The gradient belongs to the caller. AllReduce reads and writes it only
// while it runs and keeps no reference to it afterwards; it is replaced by
// the approximate average. The Compressor owns its Qs, residuals and
// scratch (about rows·cols floats per key with error feedback, plus
// (rows+cols)·r).
//
// # Failure
//
// When a peer dies, or ctx ends, or ranks disagree, AllReduce returns the
// collective's error (collective.ErrPeerLost and so on, wrapped with the
// key and the step) and grad's contents are undefined. The Compressor's
// state is then undefined across ranks (a rank may have finished a step
// its peer did not): this rank forgets every key, and every rank must
// call Reset before using its Compressor again, on a new or resynced
// Comm. Residuals are lost then, as on a restart.
package powersgd
