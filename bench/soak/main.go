// Command soak runs random-fault soaks of an elastic gorun job on the test
// hosts of scripts/testhosts.sh and prints a table: faults struck by kind,
// restarts, steps done, ranks out at the end, the longest time a rank
// stayed out, and the verdict (bench/soak.sh runs it; see internal/soak).
//
//	bash scripts/testhosts.sh up 4 --slots 2
//	go build -o bin/gorun ./cmd/gorun && go build -o bin/selftest ./examples/selftest
//	go run ./bench/soak -runs 10 -for 60s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/soak"
)

func main() {
	def := soak.DefaultConfig()
	runs := flag.Int("runs", 10, "soaks to run")
	np := flag.Int("np", 8, "ranks")
	dir := flag.String("testnet", envOr("TESTNET_DIR", "/tmp/gorun-testhosts"), "scripts/testhosts.sh's state directory")
	gorun := flag.String("gorun", "bin/gorun", "the gorun binary")
	prog := flag.String("program", "bin/selftest", "examples/selftest's binary")
	pause := flag.Duration("pause", 20*time.Millisecond, "the ranks' pause before each step")
	restarts := flag.Int("max-restarts", 100, "gorun --max-restarts")
	flag.DurationVar(&def.For, "for", def.For, "how long faults strike in each run")
	flag.DurationVar(&def.Settle, "settle", def.Settle, "how long the job runs after the faults")
	flag.DurationVar(&def.MinGap, "min-gap", def.MinGap, "shortest pause between faults")
	flag.DurationVar(&def.MaxGap, "max-gap", def.MaxGap, "longest pause between faults")
	flag.DurationVar(&def.CutFor, "cut", def.CutFor, "a host cut's length")
	kinds := flag.String("faults", strings.Join(soak.Kinds, ","), "fault kinds, each once per round")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "first run's seed (run i uses seed+i)")
	verbose := flag.Bool("v", false, "print each strike")
	flag.Parse()

	env, err := readEnv(filepath.Join(*dir, "env"))
	if err != nil {
		fail("test hosts: %v (bash scripts/testhosts.sh up 4 --slots 2)", err)
	}
	var hosts []string
	for i := range strings.Fields(env["TESTNET_HOSTS"]) {
		hosts = append(hosts, fmt.Sprintf("gr-h%d", i+1))
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	cfg := def
	cfg.Gorun = []string{abs(*gorun), "--ssh", env["TESTNET_SSH"], "-hostfile", env["TESTNET_HOSTFILE"], "-np", fmt.Sprint(*np),
		"--elastic", "--max-restarts", fmt.Sprint(*restarts), "--grace", "1s"}
	cfg.Program = abs(*prog)
	cfg.ProgramArgs = []string{"-pause", pause.String()}
	cfg.Ranks = *np
	cfg.Hosts = hosts
	cfg.Kinds = strings.Split(*kinds, ",")
	if *verbose {
		cfg.Log = func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), s) }
	}
	fmt.Printf("%d ranks on %d test hosts, faults for %v (every %v to %v: %s; cuts of %v), then %v; seed %d\n\n",
		*np, len(hosts), cfg.For, cfg.MinGap, cfg.MaxGap, *kinds, cfg.CutFor, cfg.Settle, *seed)
	fmt.Println("| run | kills | freezes | joiners struck | host cuts | restarts | steps | ranks out at the end | longest out | exit | verdict |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	bad := 0
	for i := range *runs {
		cfg.Seed = *seed + uint64(i)
		rep, err := soak.Run(context.Background(), cfg)
		if err != nil {
			fail("%v", err)
		}
		verdict := "healed"
		if err := rep.Healed(*np); err != nil {
			verdict = err.Error()
			bad++
			fmt.Fprintf(os.Stderr, "run %d (seed %d): %v\n--- gorun's stderr:\n%s\n", i+1, cfg.Seed, err, tail(rep.Stderr, 40))
		}
		fmt.Printf("| %d | %d | %d | %d | %d | %d | %d | %v | %v (rank %d) | %d | %s |\n", i+1,
			rep.Faults[soak.Kill], rep.Faults[soak.Stop], rep.Faults[soak.Joiner], rep.Faults[soak.Cut],
			rep.Restarts, rep.Steps, rep.Out, rep.Longest.Round(time.Millisecond), rep.LongestRank, rep.Exit, verdict)
	}
	if bad > 0 {
		fmt.Printf("\n%d of %d runs did not heal\n", bad, *runs)
		os.Exit(1)
	}
}

// readEnv reads testhosts.sh's env file (NAME='value' lines).
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			m[k] = strings.Trim(v, "'")
		}
	}
	return m, sc.Err()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
	os.Exit(2)
}
