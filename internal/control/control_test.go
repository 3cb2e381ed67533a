package control

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestView(t *testing.T) {
	v := View{Epoch: 1, Live: []int{0, 1, 3}}
	if got := v.String(); got != "view 1 0,1,3" {
		t.Fatalf("String %q", got)
	}
	back, err := ParseView("view 1 0,1,3")
	if err != nil || back.Epoch != 1 || !slices.Equal(back.Live, v.Live) {
		t.Fatalf("ParseView: %+v, %v", back, err)
	}
	j := View{Epoch: 4, Live: []int{0, 2, 3}, Joined: []Joiner{{2, "10.0.0.3:4021", "n2/5a1e"}, {0, "[::1]:9", "h"}}}
	if got := j.String(); got != "view 4 0,2,3 +2 10.0.0.3:4021 n2/5a1e +0 [::1]:9 h" {
		t.Fatalf("String %q", got)
	}
	back, err = ParseView(j.String())
	if err != nil || !slices.Equal(back.Joined, j.Joined) || !slices.Equal(back.Live, j.Live) {
		t.Fatalf("ParseView(%q): %+v, %v", j.String(), back, err)
	}
	for _, bad := range []string{"", "view", "view 1", "view 1 ", "view 0 0,1", "view 1 0,1 +1 a", "view 1 0,1 +2 a b",
		"view 1 0,1 1 a b", "view 1 0,1 +1 a b +1 c d", "view 1 0,1 +1 a  b", "view 1 0,1 +1 a b ", "view 1 0 +0 a\x01 b",
		"view 1 0,1 +x a b", "view 1 0,1 +", "view -1 0", "view 1 0,,1", "view 1 1,0",
		"view 1 0,0", "view x 0", "view 1 0,1 ", "view 1 +1", "views 1 0", "suspect 1 x", "view 1 9999999999"} {
		if _, err := ParseView(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseView(%q): %v, want ErrMalformed", bad, err)
		}
	}
}

func TestSuspect(t *testing.T) {
	for line, want := range map[string]Suspect{
		"suspect 3 0 frozen":                     {3, 0, "frozen"},
		"suspect 0 7 no frames for 2s from rank": {0, 7, "no frames for 2s from rank"},
		"suspect 12 1":                           {12, 1, ""},
		"suspect 12 4 ":                          {12, 4, ""},
		"suspect 1 2 a\tb":                       {1, 2, "a b"},
	} {
		got, err := ParseSuspect(line)
		if err != nil || got != want {
			t.Errorf("ParseSuspect(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	}
	for _, bad := range []string{"", "suspect", "suspect ", "suspect x frozen", "suspect -1 x", "suspect  3 x", "SUSPECT 3 x", "view 1 0", "suspect 3 frozen", "suspect 3", "suspect 3 -1 x"} {
		if _, err := ParseSuspect(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseSuspect(%q): %v, want ErrMalformed", bad, err)
		}
	}
	if got := (Suspect{Rank: 2, Epoch: 5, Reason: "a\nb"}).String(); got != "suspect 2 5 a b" {
		t.Fatalf("a newline in the reason must not end the line: %q", got)
	}
}

// TestReader: lines come out whole at every split of the stream, \r\n
// is one newline, a line past MaxLine is reported and skipped, and a last
// line without a newline still counts.
func TestJoin(t *testing.T) {
	j := Join{Addr: "10.0.0.3:4021", Host: "n2/5a1e"}
	if got := j.String(); got != "join 10.0.0.3:4021 n2/5a1e" {
		t.Fatalf("String %q", got)
	}
	if back, err := ParseJoin(j.String()); err != nil || back != j {
		t.Fatalf("ParseJoin: %+v, %v", back, err)
	}
	for _, bad := range []string{"", "join", "join ", "join a", "join a ", "join  a b", "join a b c", "join a\tb c", "JOIN a b", "join a b\x7f"} {
		if _, err := ParseJoin(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseJoin(%q): %v, want ErrMalformed", bad, err)
		}
	}
}

func TestReader(t *testing.T) {
	long := strings.Repeat("x", MaxLine+1)
	exact := strings.Repeat("y", MaxLine)
	stream := "suspect 1 a\r\n\n" + long + "\nview 2 0,1\n" + exact + "\nlast"
	want := []string{"suspect 1 a", "", "ERR", "view 2 0,1", exact, "last", "EOF"}
	read := func(r io.Reader) []string {
		var got []string
		cr := NewReader(r)
		for {
			line, err := cr.Next()
			switch {
			case errors.Is(err, ErrLineTooLong):
				got = append(got, "ERR")
				continue
			case err == io.EOF:
				return append(got, "EOF")
			case err != nil:
				return append(got, err.Error())
			}
			got = append(got, string(line))
		}
	}
	if got := read(iotest.OneByteReader(strings.NewReader(stream))); !slices.Equal(got, want) {
		t.Fatalf("one byte at a time: %.100q", got)
	}
	for _, at := range []int{0, 1, 11, 12, 13, 14, 15 + MaxLine, 15 + MaxLine + 1, len(stream) - 1, len(stream)} {
		r := io.MultiReader(strings.NewReader(stream[:at]), strings.NewReader(stream[at:]))
		if got := read(r); !slices.Equal(got, want) {
			t.Fatalf("split at %d: %.100q", at, got)
		}
	}
	if got := read(strings.NewReader(long)); !slices.Equal(got, []string{"EOF"}) {
		t.Fatalf("an endless last line: %q", got)
	}
}

// FuzzParse: no line makes a parser panic, and whatever parses prints
// back to a line that parses to the same message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"view 1 0,1,3", "suspect 3 frozen", "suspect 0", "view 2 5", "view 1 0,,", "suspect 1 \x00", "view 3 0,1 +1 a:1 h/x", "join a:1 h/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if v, err := ParseView(line); err == nil {
			back, err := ParseView(v.String())
			if err != nil || back.Epoch != v.Epoch || !slices.Equal(back.Live, v.Live) || !slices.Equal(back.Joined, v.Joined) {
				t.Fatalf("view %q prints as %q, parses back as %+v, %v", line, v.String(), back, err)
			}
		}
		if j, err := ParseJoin(line); err == nil {
			if back, err := ParseJoin(j.String()); err != nil || back != j {
				t.Fatalf("join %q prints as %q, parses back as %+v, %v", line, j.String(), back, err)
			}
		}
		if s, err := ParseSuspect(line); err == nil {
			if back, err := ParseSuspect(s.String()); err != nil || back != s {
				t.Fatalf("suspect %q prints as %q, parses back as %+v, %v", line, s.String(), back, err)
			}
		}
	})
}
