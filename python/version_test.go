package python

import (
	"regexp"
	"testing"
)

// A PEP 440 release: what pip and the wheel's file name take, and what
// `gorun --version` prints unchanged.
var releaseRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$`)

func TestVersion(t *testing.T) {
	if !releaseRE.MatchString(Version) {
		t.Fatalf("python/gorun/__init__.py: __version__ %q: want one line __version__ = \"X.Y.Z\" (a PEP 440 release)", Version)
	}
	for src, want := range map[string]string{
		"__version__ = \"1.2.3\"\n":                    "1.2.3",
		"\"\"\"doc\"\"\"\n\n__version__ = \"0.1.0\"\n": "0.1.0",
		"x = 1\n":                 "",
		"  __version__ = \"1\"\n": "",
	} {
		if got := version(src); got != want {
			t.Errorf("version(%q) = %q, want %q", src, got, want)
		}
	}
}
