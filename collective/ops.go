package collective

import "github.com/gorun/gorun/reduce"

// Number is an element type the collectives work on.
type Number = reduce.Number

// Op is a reduction.
type Op = reduce.Op

// The reductions. Integer Avg is the sum divided by the number of ranks,
// truncated toward zero; integer Sum and Prod wrap around on overflow.
const (
	Sum  = reduce.Sum
	Avg  = reduce.Avg
	Min  = reduce.Min
	Max  = reduce.Max
	Prod = reduce.Prod
)

// Wire is how a float32 all-reduce's data travels between ranks: at full
// precision, or as fp16 or bf16 (2 bytes an element), with every sum
// still taken in float32 (reduce.Wire has the rules: rounding to nearest
// even, saturation at the format's largest finite value).
type Wire = reduce.Wire

// The wire formats.
const (
	WireFull = reduce.WireFull
	WireFP16 = reduce.WireFP16
	WireBF16 = reduce.WireBF16
)

func dtype[T Number]() uint8 { return reduce.DTypeOf[T]() }

func reducer[T Number](op Op) func(dst, src []T) { return reduce.Func[T](op) }

func finish[T Number](op Op, buf []T, n int) { reduce.Finish(op, buf, n) }
