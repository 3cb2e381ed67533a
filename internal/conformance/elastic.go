package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/collective"
)

// ElasticOptions shape ElasticDrill.
type ElasticOptions struct {
	// How the last rank strikes itself early in its 10th step: SIGKILL
	// (a death), SIGSTOP (a freeze that gorun must fence), or 0 (none, for
	// drills that strike from outside). A restarted rank does not strike
	// again.
	How syscall.Signal
	// Pause is every rank's pause before each step.
	Pause time.Duration
	// Rejoin (gorun --max-restarts): go on until the view holds every
	// rank again, then 10 steps more (at most 3000 steps in all).
	Rejoin bool
	// DieOnRestart, if not 0, makes the victim's DieOnRestart-th restart
	// strike itself with DieHow (SIGKILL if 0) as its first Resync starts:
	// a joiner lost (or frozen) during its state transfer.
	DieOnRestart int
	DieHow       syscall.Signal
	// Steps is how many steps the drill runs (30 if 0): many, with a
	// Pause, make a soak that faults from outside can strike for a while.
	Steps int
	// Until, if set, replaces Steps: a soak. The ranks step until this
	// time has passed and the view holds every rank of the job, then stop
	// together (each step's all-reduce carries how many of them would
	// stop, so every rank of a view ends at the same step). A view that
	// is still short MaxOut after Until ends the soak with an error.
	Until time.Time
}

// MaxOut is how long after ElasticOptions.Until a soak waits for the
// view to hold every rank again.
const MaxOut = 60 * time.Second

// ElasticDrill is the rank program of the elastic ring drills (gorun
// --elastic): 30 steps (o.Steps) of 256 KiB all-reduces, each checked exactly
// against the ranks of the current view, with the strike and pauses of
// o. A rank that gets ErrViewChanged takes the step from the view (Resync,
// the documented pattern) and goes on.
//
// It reports "STEP 5" (rank 0, once there), "STRIKE ns" (the victim),
// "CHANGED ns err" at each view change, "RECOVERED ns stall epoch" when
// the step it interrupted is done on the new view (stall: from that
// step's start), "RESUMED ns" once (the first collective completed on a
// new view), "BACK ns" (a restarted rank, its first Resync done) and, at
// the end, "DONE changes=N view={E [ranks]} size=S" (a soak adds
// " steps=N", the steps the job completed).
func ElasticDrill(ctx context.Context, c *collective.Comm, o ElasticOptions, report func(string)) error {
	victim := c.JobSize() - 1
	whole := c.JobSize()
	changes, resumed := 0, false
	var stallFrom time.Time // the start of a step a view change interrupted
	steps := cmp.Or(o.Steps, 30)
	soak := !o.Until.IsZero()
	const n = 32 << 10
	step := 0
	for ; soak || step < steps || o.Rejoin && c.Size() < whole && step < steps+3000; step++ {
		buf := make([]float64, n, n+1)
		for i := range buf {
			buf[i] = float64((c.Rank()+1)*100 + step)
		}
		if soak {
			// The last element counts the ranks that would stop here.
			now := time.Now()
			stop := now.After(o.Until) && c.Size() == whole || now.After(o.Until.Add(MaxOut))
			buf = append(buf, float64(b2i(stop)))
		}
		if c.Rank() == victim && step == 10 && o.How != 0 && c.Restarts() == 0 {
			go func() {
				time.Sleep(5 * time.Millisecond)
				report(fmt.Sprintf("STRIKE %d", time.Now().UnixNano()))
				_ = syscall.Kill(os.Getpid(), o.How)
			}()
		}
		if step == 5 && c.Rank() == 0 && changes == 0 {
			report("STEP 5") // for drills that strike from outside
		}
		time.Sleep(o.Pause)
		began := time.Now()
		err := collective.AllReduce(ctx, c, buf, collective.Sum)
		if errors.Is(err, collective.ErrViewChanged) {
			changes++
			if stallFrom.IsZero() {
				stallFrom = began
			}
			report(fmt.Sprintf("CHANGED %d %v", time.Now().UnixNano(), err))
			state := []int64{int64(step)}
			if o.DieOnRestart > 0 && c.Restarts() == o.DieOnRestart && changes == 1 {
				how := cmp.Or(o.DieHow, syscall.SIGKILL)
				go func() {
					time.Sleep(time.Millisecond)
					report(fmt.Sprintf("STRIKE %d", time.Now().UnixNano()))
					_ = syscall.Kill(os.Getpid(), how)
				}()
			}
			if err := collective.Resync(ctx, c, state); err != nil {
				return fmt.Errorf("resync after the view change: %w", err)
			}
			if c.Restarts() > 0 && changes == 1 {
				report(fmt.Sprintf("BACK %d", time.Now().UnixNano()))
			}
			step = int(state[0]) - 1
			continue
		}
		if err != nil {
			return err
		}
		if !stallFrom.IsZero() {
			now := time.Now()
			report(fmt.Sprintf("RECOVERED %d %d %d", now.UnixNano(), now.Sub(stallFrom).Nanoseconds(), c.View().Epoch))
			stallFrom = time.Time{}
		}
		if changes > 0 && !resumed {
			resumed = true
			report(fmt.Sprintf("RESUMED %d", time.Now().UnixNano()))
		}
		var want float64
		for _, r := range c.View().Ranks {
			want += float64((r+1)*100 + step)
		}
		for i, x := range buf[:n] {
			if x != want {
				return fmt.Errorf("step %d, view %v: [%d] = %v, want %v", step, c.View(), i, x, want)
			}
		}
		if soak && buf[n] > 0 {
			step++
			break
		}
	}
	if (o.Rejoin || soak) && c.Size() < whole {
		return fmt.Errorf("the view never held every rank again: %v", c.View())
	}
	v := c.View()
	done := fmt.Sprintf("DONE changes=%d view={%d %v} size=%d", changes, v.Epoch, v.Ranks, c.Size())
	if soak {
		done += fmt.Sprintf(" steps=%d", step)
	}
	report(done)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
