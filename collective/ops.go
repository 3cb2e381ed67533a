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

func dtype[T Number]() uint8 { return reduce.DTypeOf[T]() }

func reducer[T Number](op Op) func(dst, src []T) { return reduce.Func[T](op) }

func finish[T Number](op Op, buf []T, n int) { reduce.Finish(op, buf, n) }
