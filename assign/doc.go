// Package assign splits a round of training samples over workers of unequal
// speed by solving an optimisation problem (after the survey's first
// proposal, "minimise w1·max_i t_i − w2·accuracy − w3·resource subject to
// deadlines"). It is a pure function: no I/O, no clock, no goroutines, no
// printing. Measured speeds come in, integer shares come out.
//
// # Model
//
// Worker i has a cost c_i (seconds per sample, measured), a fixed
// overhead o_i (seconds per round, paid by every worker in the problem,
// whatever its share: leave a worker out of Problem.Workers to not use
// it), a capacity cap_i (most samples that fit in memory, 0 = none), a
// floor f_i and a ceiling g_i (fractions of Problem.Samples, g_i = 0
// meaning none) and a resource price r_i (per busy second). Its share
// x_i takes it t_i = c_i·x_i + o_i seconds. Solve minimises
//
//	w1·T + w3·Σ_i r_i·t_i − w2·N,   T = max_i t_i,  N = Σ_i x_i
//
// over integers x_i with
//
//	⌈f_i·S⌉ ≤ x_i ≤ min(cap_i, ⌊g_i·S⌋)
//	c_i·x_i + o_i ≤ D                 (deadline D, when D > 0)
//	S ≤ N ≤ S_max                     (N = S unless MaxSamples > S)
//
// A worker of cost 0 takes any share in its overhead time; with no cap it
// takes the whole round when only time is weighed. Weights must be
// finite and not negative; all zero makes every feasible split optimal.
//
// Accuracy proxy. The w2 term rewards samples processed per round: when
// MaxSamples > Samples the round may grow from S to S_max, and each extra
// sample is worth w2 (in the objective's unit, seconds when w1 = 1). This
// is the defensible, measurable part of "accuracy" at this layer: more
// samples per synchronous step means a larger effective batch and less
// gradient noise, and a job sets S as the minimum batch its learning rate
// is tuned for and S_max as the largest it tolerates. With w2 = 0 (or
// MaxSamples ≤ Samples) the problem is the plain time/resource one with
// N = S. Floors and ceilings stay fractions of the nominal S.
//
// # Method
//
// Solve validates the problem, turns the limits into integer bounds
// lo_i ≤ x_i ≤ hi_i (the deadline gives hi_i ≤ ⌊(D − o_i)/c_i⌋), and
// reports an infeasible problem before any solving: with box bounds and a
// sum, an integer split exists exactly when Σ lo_i ≤ S_max and
// Σ hi_i ≥ S. It then solves the linear relaxation with gonum's simplex
// (lp.Simplex, in standard form with slack variables: see solveLP), whose
// optimum is Assignment.LowerBound.
//
// Rounding rule: the total is rounded down to an integer in [S, S_max],
// every share down, and the missing samples go to the largest remainders
// among workers below their upper bound; a repair pass gives anything
// left to the worker that would finish first. Every share moves by less
// than a sample, so the rounded split is at most
//
//	RoundingBound = w1·max_i c_i + w3·Σ_i r_i·c_i + w2
//
// above the LP optimum, and so above the integer optimum.
//
// The rounded split is then improved by an exact search (Assignment.Exact):
// for a makespan T, the rest of the objective is linear and separable and
// a greedy fill is optimal, and the optimal T is a time some worker
// reaches exactly, T = o_i + c_i·k, in a window the rounded split bounds.
// When the window holds more than Config.ExactBudget candidate·worker
// steps, Solve keeps the rounded split after local moves off the last
// worker, still within RoundingBound. The tests check Solve against
// enumerating every integer split on thousands of random small problems
// (equal optimum within 1e-7), the rounded LP against RoundingBound, and
// LB-BSP's proportional split (x_i ∝ 1/c_i) as never better.
//
// # Errors
//
// Every error wraps ErrInvalid (malformed input: NaN, ±Inf, negative
// values, fractions outside [0, 1], a floor above its ceiling, counts
// above MaxSamples, magnitudes above 1e12, no workers or more than
// Config.MaxWorkers), ErrInfeasible (no integer split meets the
// constraints; the message names the binding one: "capacities sum to 900
// samples, the round needs 1000", "deadline 2s: worker 3 alone needs 2.4s
// for its floor of 100 samples", "deadline 2s: worker 1's overhead alone
// is 2.5s", "floors sum to 1.1 of the round, above 1", "worker limits sum
// to 100 samples (worker 0: capacity 30, …), the round needs 101"), or
// ErrSolver (the simplex failed numerically on a feasible problem).
//
// # Reading the answer
//
// Assignment gives the shares, each worker's time and idle share
// (T − t_i)/T, the makespan, the resource term, the objective, the LP
// bound, each worker's active limit (floor, capacity, ceiling, deadline,
// total) and Binding, a sentence naming the workers at a limit, the
// workers that finish last, and whether the deadline binds.
//
// # Users
//
// ParamHub's optimal share rule (ps.ShareConfig with the rule "optimal",
// gorun --hub-share optimal) builds a Problem from hub 0's measurements
// (c_i = 1/v_i from each worker's fitted speed, o_i its fixed compute per
// iteration), with the job's limits (capacity, deadline, prices), calls
// Solve and answers each worker with Samples[i]; a worker with no estimate
// yet counts at the mean speed. The launcher's --map-by speed places ranks
// by the hostfile's speed= attribute ("node1 slots=4 speed=2.5"): each
// host is a worker whose ranks take 1/speed each, within its slots, and
// Solve makes the slowest host's time as short as it can be.
package assign
