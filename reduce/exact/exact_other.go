//go:build !amd64 || purego

package exact

// Without the amd64 kernels every conversion runs element by element.

func codes32(x []float32, codes []uint8) { codes32Go(x, codes) }

func codesMax32(x []float32, codes []uint8) { codesMax32Go(x, codes) }

func toFixed32(x []float32, codes []uint8, q []int32, h int) { toFixed32Go(x, codes, q, h) }

func addFixed32(x []float32, codes []uint8, q []int32, h int) { addFixed32Go(x, codes, q, h) }

func fromFixed32(q []int32, codes []uint8, out []float32, h, avg int) {
	fromFixed32Go(q, codes, out, h, avg)
}

func codes64(x []float64, codes []int32) { codes64Go(x, codes) }

func toFixed64(x []float64, codes []int32, q []int64, h int) { toFixed64Go(x, codes, q, h) }

func fromFixed64(q []int64, codes []int32, out []float64, h, avg int) {
	fromFixed64Go(q, codes, out, h, avg)
}
