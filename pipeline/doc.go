// Package pipeline prepares a data set for distributed training: it reads
// it, standardizes it with statistics computed over every rank, drops
// samples that carry little information, and deals every epoch's samples
// to the ranks, also after an elastic job's view changed in the middle of
// an epoch. A trainer builds one Pipeline on every rank, the same way, and
// iterates over its batches.
//
// # Stages
//
//  1. Input. ReadIDX reads the IDX files of MNIST and Fashion-MNIST
//     (images [n][rows][cols] uint8, labels [n] uint8, each raw or
//     gzipped); ReadCSV reads numeric features with an integer label
//     column, chosen by name (with a header) or by index. Both give a
//     Dataset: N samples of D float32 features and N int labels. Both read
//     at most ReadConfig.MaxBytes per file (after decompression), check a
//     header's sizes against the bytes really there before allocating, and
//     report a malformed file as a *FormatError with the byte offset (IDX)
//     or line (CSV).
//  2. Statistics (Config.Standardize). Per-feature mean and population
//     variance over the samples of every rank, never one rank's: each
//     rank sums the rows of its block of the data (Block), in float64,
//     and two all-reduces add them up: the count and the sums, giving the
//     mean, then the squared deviations from that mean (Fit). Fit also
//     works on shards of any sizes, zero included, when ranks hold
//     different rows.
//  3. Standardization: x becomes (x - mean) / sqrt(var + Config.Epsilon),
//     so a feature of zero variance becomes 0 (Epsilon 1e-8 by default).
//  4. Filter (Config.FilterTol > 0). The rule: a sample is dropped when
//     every one of its standardized features lies within FilterTol of 0,
//     that is within FilterTol standard deviations of the feature's mean:
//     such a sample is close to the average input in every coordinate and
//     adds little to what the model sees. Nothing else is dropped, and the
//     order of the rest is kept. Every rank holds the same data and the
//     same statistics (an all-reduce's result is bitwise the same on every
//     rank), so every rank drops the same samples; one more all-reduce
//     checks the counts agree (ErrInconsistent otherwise). Report.Dropped
//     says how many.
//  5. Sampling. Each epoch's order comes from Config.Seed and the epoch
//     alone (Sampler.Order): a permutation, or with Config.Replacement N
//     uniform draws with replacement (repeated random sampling). A Part
//     deals positions of that order round-robin to the view's ranks; the
//     last N mod ranks positions are dropped for the epoch (as torch's
//     DistributedSampler with drop_last), so every rank gets N/ranks
//     samples, the shards are disjoint and together cover the rest
//     exactly once.
//  6. Re-sharding. When an elastic job's view changes in the middle of an
//     epoch, Part.Resume(consumed, newRanks) deals the positions not yet
//     consumed to the new view's ranks, with nothing dropped: with what
//     was consumed, the epoch is still covered exactly once. Because the
//     deal is round-robin and every rank takes the same number of samples
//     per step, what the old ranks consumed after k steps of batch b is
//     the prefix Part.Consumed(k, b) positions long, whichever rank died.
//  7. Batches: Pipeline.Batches(part, rank, batch) iterates over the rank's
//     share in batches; every rank gets Part.Steps(batch) of them.
//
// # Call order across ranks
//
// Every rank holds the whole data set (it is small next to the model, and
// the sampler deals indices, not rows) and must run, with the same data
// and Config:
//
//	d, err := pipeline.ReadIDX(images, labels, pipeline.DefaultReadConfig())
//	p, err := pipeline.New(d, cfg)
//	rep, err := p.Prepare(ctx, pipeline.FromComm(c)) // collective: every rank, same point
//	for epoch := range epochs {
//		part, err := p.Part(epoch, c.View().Ranks)
//		batches, err := p.Batches(part, c.Rank(), 64)
//		for x, y := range batches { ... }
//	}
//
// Prepare is the only call that talks to peers: it issues two all-reduces
// (three with the filter) in the Comm's order, so every rank must call it
// at the same point of its program. Everything else is a pure function of
// the data, the Config, the epoch and the ranks, and gives the same
// result on every rank without messages.
//
// On a view change (collective.ErrViewChanged during step k of an epoch,
// after the Resync that agrees on k), every survivor computes
//
//	part, err = part.Resume(part.Consumed(k, batch), c.View().Ranks)
//
// and iterates over its new Batches. End each epoch with a collective
// that every rank calls (a Barrier, or the next epoch's first step), and
// treat its ErrViewChanged as one at step Steps: a rank that finished the
// last step before the change otherwise never learns of it while the
// others wait in Resync. A Part is three integers and a
// rank list, all the same on every rank: put Epoch, Start and End with
// the old ranks (or the step k) in the state a Resync sends, and a
// restarted rank computes the same Part as the survivors. The Part after a Resume
// gives shares that differ by at most one sample; Steps is the same on
// every rank, and a rank's last batch may be short or empty, so weigh
// gradients by the batch's length.
//
// # Buffers
//
// New takes the Dataset: Prepare rewrites it in place, and Data returns
// it for reading. The slices Batches yields belong to the iterator and
// are valid until the next iteration.
//
// # Failure
//
// A peer that dies during Prepare makes its all-reduce fail: Prepare
// returns the collective's error (collective.ErrPeerLost,
// collective.ErrViewChanged, ...) wrapped, and the Pipeline must not be
// used; build it again, after a Resync on an elastic job. Nothing else in
// the package talks to peers, so nothing else can fail because of one.
// The package never prints, and holds no goroutines or files: there is
// nothing to close.
package pipeline
