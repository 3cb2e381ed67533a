package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/collective"
)

// ElasticDrill is the rank program of the elastic ring drills (gorun
// --elastic): 30 steps of 256 KiB all-reduces, each checked exactly
// against the ranks of the current view; the last rank signals itself
// with how (SIGKILL: a death, SIGSTOP: a freeze that gorun must fence;
// 0: none, for drills that strike from outside) early in its 10th step,
// and every rank pauses before each step. A survivor that gets ErrViewChanged takes the
// step from the view's first rank (Resync, the documented pattern) and
// goes on.
// It reports "STEP 5" (rank 0, once there), "STRIKE ns" (the victim),
// "CHANGED ns err" and "RESUMED ns"
// (the first collective completed on the new view) and, at the end,
// "DONE changes=N view={E [ranks]} size=S".
func ElasticDrill(ctx context.Context, c *collective.Comm, how syscall.Signal, pause time.Duration, report func(string)) error {
	victim := c.Size() - 1
	changes, resumed := 0, false
	for step := 0; step < 30; step++ {
		buf := make([]float64, 32<<10)
		for i := range buf {
			buf[i] = float64((c.Rank()+1)*100 + step)
		}
		if c.Rank() == victim && step == 10 && how != 0 {
			go func() {
				time.Sleep(5 * time.Millisecond)
				report(fmt.Sprintf("STRIKE %d", time.Now().UnixNano()))
				_ = syscall.Kill(os.Getpid(), how)
			}()
		}
		if step == 5 && c.Rank() == 0 && changes == 0 {
			report("STEP 5") // for drills that strike from outside
		}
		time.Sleep(pause)
		err := collective.AllReduce(ctx, c, buf, collective.Sum)
		if errors.Is(err, collective.ErrViewChanged) {
			changes++
			report(fmt.Sprintf("CHANGED %d %v", time.Now().UnixNano(), err))
			state := []int64{int64(step)}
			if err := collective.Resync(ctx, c, state); err != nil {
				return fmt.Errorf("resync after the view change: %w", err)
			}
			step = int(state[0]) - 1
			continue
		}
		if err != nil {
			return err
		}
		if changes > 0 && !resumed {
			resumed = true
			report(fmt.Sprintf("RESUMED %d", time.Now().UnixNano()))
		}
		var want float64
		for _, r := range c.View().Ranks {
			want += float64((r+1)*100 + step)
		}
		for i, x := range buf {
			if x != want {
				return fmt.Errorf("step %d, view %v: [%d] = %v, want %v", step, c.View(), i, x, want)
			}
		}
	}
	report(fmt.Sprintf("DONE changes=%d view=%v size=%d", changes, c.View(), c.Size()))
	return nil
}
