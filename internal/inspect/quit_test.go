package inspect

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spinInOwnCode is a goroutine that never parks: in the runtime's own
// SIGQUIT dump it is "running on other thread; stack unavailable".
//
//go:noinline
func spinInOwnCode(stop *bool) {
	for x := 0; !*stop; x++ {
	}
}

// TestCatchQuitShowsRunningGoroutines: a process whose goroutine spins
// on another thread gets SIGQUIT; with CatchQuit its stderr holds that
// goroutine's stack, and it still dies of the signal (exit 2).
func TestCatchQuitShowsRunningGoroutines(t *testing.T) {
	if os.Getenv("INSPECT_QUIT_CHILD") == "1" {
		CatchQuit()
		runtime.GOMAXPROCS(2)
		stop := false
		go spinInOwnCode(&stop)
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCatchQuitShowsRunningGoroutines$")
	cmd.Env = append(os.Environ(), "INSPECT_QUIT_CHILD=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	time.Sleep(50 * time.Millisecond) // the spinner is on its thread
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("child ended with %v, want exit 2 as SIGQUIT ends a Go program", err)
	}
	dump := stderr.String()
	first, _, _ := strings.Cut(dump[strings.Index(dump, "goroutines stopped by gorun's dump"):], "\nSIGQUIT: quit\n")
	if !strings.Contains(first, "inspect.spinInOwnCode") {
		t.Fatalf("the stopped-world dump lacks the spinning goroutine:\n%s", dump)
	}
}
