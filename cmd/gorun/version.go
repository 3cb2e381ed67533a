package main

import (
	"runtime"
	"runtime/debug"
)

// versionLine is what `gorun --version` prints, from bi (the binary's
// build information; nil if it has none):
//
//	gorun version VERSION (COMMIT TIME[ dirty]) GOVERSION OS/ARCH
//
// VERSION is the main module's version, "(devel)" if it has none; the
// parenthesis comes from the VCS settings `go build` stamps in a git
// checkout (the commit shortened to 12 digits, its time, and "dirty" with
// uncommitted changes) and is left out without them.
func versionLine(bi *debug.BuildInfo) string {
	ver, rev, at, dirty := "(devel)", "", "", false
	if bi != nil {
		if bi.Main.Version != "" {
			ver = bi.Main.Version
		}
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
