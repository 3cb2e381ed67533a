package ps_test

import (
	"fmt"
	"time"

	"github.com/gorun/gorun/ps"
)

// ExampleShareConfig_Split: two workers compute 100 samples a second
// each, but worker 1 spends a further second per iteration talking to the
// hubs. Proportional shares leave worker 0 idle half the iteration; the
// optimal rule gives it the samples worker 1 has no time for.
func ExampleShareConfig_Split() {
	speeds := []float64{100, 100}
	prop, _ := ps.ShareConfig{}.Split(200, speeds, nil)
	cfg := ps.ShareConfig{Rule: ps.ShareOptimal, Overhead: []time.Duration{0, time.Second}}
	opt, err := cfg.Split(200, speeds, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("proportional:", prop)
	fmt.Println("optimal:", opt)
	// Output:
	// proportional: [100 100]
	// optimal: [150 50]
}
