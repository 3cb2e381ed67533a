package main

import (
	"runtime"
	"runtime/debug"
)

// versionLine is what `gorun --version` prints, from ver (gorun's version:
// python.Version, the Python package's __version__, so that gorun and the
// package in the same wheel agree) and bi (the binary's build information;
// nil if it has none):
//
//	gorun version VERSION (COMMIT TIME[ dirty]) GOVERSION OS/ARCH
//
// VERSION is "(devel)" if ver is empty; the parenthesis comes from the VCS
// settings `go build` stamps in a git checkout (the commit shortened to 12
// digits, its time, and "dirty" with uncommitted changes) and is left out
// without them.
func versionLine(ver string, bi *debug.BuildInfo) string {
	rev, at, dirty := "", "", false
	if ver == "" {
		ver = "(devel)"
	}
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	line := "gorun version " + ver
	if rev != "" {
		line += " (" + rev[:min(len(rev), 12)]
		if at != "" {
			line += " " + at
		}
		if dirty {
			line += " dirty"
		}
		line += ")"
	}
	return line + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
