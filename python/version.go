// Package python gives Go the version of gorun's Python package
// (python/gorun), which is gorun's version: `gorun --version` prints it,
// and the wheel that python/mkwheel builds is named by it, so the launcher
// and the package it installs always agree. The package's tests
// (python/*_test.go: the backend, Horovod's API, jobs gorun did not start,
// small operations, the wheel) run it under gorun and beside it.
package python

import (
	_ "embed"
	"regexp"
)

//go:embed gorun/__init__.py
var initPy string

// Version is the __version__ of python/gorun/__init__.py (the one place
// that holds it), "" if the file has no line __version__ = "...".
var Version = version(initPy)

var versionRE = regexp.MustCompile(`(?m)^__version__ = "([^"\n]+)"\s*$`)

func version(src string) string {
	m := versionRE.FindStringSubmatch(src)
	if m == nil {
		return ""
	}
	return m[1]
}
