package mpitest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestJobRunning: a file named for a job counts as a running job's while a
// process has that job's id in its environment, and not after.
func TestJobRunning(t *testing.T) {
	id := fmt.Sprintf("t%d", time.Now().UnixNano())
	path := "/dev/shm/gorun-" + id + "-ompi-123"
	if got := jobOf(path); got != id {
		t.Fatalf("jobOf(%q) = %q, want %q", path, got, id)
	}
	if jobOf("/dev/shm/vader_segment.1") != "" || jobOf("/tmp/gorun-x") != "" {
		t.Fatal("a name that is not gorun-<id>-... gave a job id")
	}
	if jobRunning(id) {
		t.Fatalf("job %s runs before any process has its id", id)
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "GORUN_JOB_ID="+id)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !jobRunning(id) || jobRunning(id+"0") {
		t.Errorf("with a process of job %s: running %v, a longer id running %v", id, jobRunning(id), jobRunning(id+"0"))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if jobRunning(id) {
		t.Errorf("job %s still runs after its process was killed", id)
	}
}
