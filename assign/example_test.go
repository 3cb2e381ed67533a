package assign_test

import (
	"fmt"

	"github.com/gorun/gorun/assign"
)

// Three workers measured at 10, 20 and 40 ms per sample; the slow one
// has 0.2 s of fixed overhead and room for 30 samples. LB-BSP's split
// by speed alone would be 57/29/14 (makespan 0.76 s); Solve balances the
// finishing times.
func ExampleSolve() {
	a, err := assign.Solve(assign.Problem{
		Samples: 100,
		Workers: []assign.Worker{
			{Cost: 0.010},
			{Cost: 0.020},
			{Cost: 0.040, Overhead: 0.2, Cap: 30},
		},
		Weights: assign.Weights{Time: 1},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.Samples, a.Total)
	fmt.Printf("makespan %.2fs, idle %.2f %.2f %.2f\n", a.Makespan, a.Idle[0], a.Idle[1], a.Idle[2])
	fmt.Println(a.Binding)

	_, err = assign.Solve(assign.Problem{
		Samples:  100,
		Deadline: 0.5,
		Workers:  []assign.Worker{{Cost: 0.010}, {Cost: 0.020}, {Cost: 0.040, Overhead: 0.2, Cap: 30}},
		Weights:  assign.Weights{Time: 1},
	})
	fmt.Println(err)
	// Output:
	// [60 30 10] 100
	// makespan 0.60s, idle 0.00 0.00 0.00
	// makespan 0.6s (last: worker 0, 1, 2)
	// assign: infeasible: deadline 0.5s: the workers can do 82 samples by then, the round needs 100
}
