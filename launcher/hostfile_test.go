package launcher

import (
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseHostfile(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Host
	}{
		{"openmpi", "node1 slots=4\nnode2 slots=2 max_slots=8\n", []Host{{"node1", 4, 0, 0}, {"node2", 2, 8, 0}}},
		{"bare host is one slot", "a\nb\n", []Host{{"a", 1, 0, 0}, {"b", 1, 0, 0}}},
		{"comments and blanks", "# cluster\n\n  a slots=2   # rack 1\n\t\n#b\n", []Host{{"a", 2, 0, 0}}},
		{"repeated host adds slots", "a slots=2\nb\na slots=3\n", []Host{{"a", 5, 0, 0}, {"b", 1, 0, 0}}},
		{"mpich", "a:4\nb:1\nc\n", []Host{{"a", 4, 0, 0}, {"b", 1, 0, 0}, {"c", 1, 0, 0}}},
		{"ipv4", "198.18.0.11 slots=2\n198.18.0.12:3\n", []Host{{"198.18.0.11", 2, 0, 0}, {"198.18.0.12", 3, 0, 0}}},
		{"ipv6 in brackets", "[::1] slots=2\n[fe80::1]:3\n", []Host{{"::1", 2, 0, 0}, {"fe80::1", 3, 0, 0}}},
		{"max-slots spelling", "a slots=1 max-slots=2", []Host{{"a", 1, 2, 0}}},
		{"crlf", "a slots=2\r\nb:3\r\n", []Host{{"a", 2, 0, 0}, {"b", 3, 0, 0}}},
		{"speed", "fast slots=4 speed=2.5\nslow:2 # speed 1\nfast slots=1 speed=9\n", []Host{{"fast", 5, 0, 2.5}, {"slow", 2, 0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHostfile("hosts", strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseHostfileErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a slots=2\nb slots=x\n", `hosts:2: slots: not a number "x"`},
		{"a\n\n\nb slots=0", "hosts:4: slots: must be at least 1, got 0"},
		{"a slots=-1", "hosts:1: slots: must be at least 1"},
		{"a cpus=4", `hosts:1: unknown setting "cpus"`},
		{"a slots", `hosts:1: expected key=value, got "slots"`},
		{"a slots=1 slots=2", "hosts:1: slots given twice"},
		{"a:2 slots=2", "hosts:1: slots given twice"},
		{"a:x", `hosts:1: slots: not a number "x"`},
		{"a slots=4 max_slots=2", "hosts:1: max_slots 2 is less than slots 4"},
		{"fe80::1 slots=2", "hosts:1: IPv6 address"},
		{"[fe80::1", "hosts:1: unclosed '['"},
		{"[1.2.3.4]", "is not an IPv6 address"},
		{"[::1]x", `hosts:1: unexpected "x"`},
		{"a/b", "bad character '/'"},
		{"-oProxyCommand", "starts with '-'"},
		{"# only comments\n", "hosts:1: no hosts"},
		{"", "hosts:0: no hosts"},
		{"a slots=99999999999", "too large"},
		{"a speed=0", `hosts:1: speed: want a positive number up to 1e6, not "0"`},
		{"a speed=fast", `speed: want a positive number up to 1e6, not "fast"`},
		{"a speed=NaN", `not "NaN"`},
		{"a speed=-2", `not "-2"`},
		{"a speed=1e9", `not "1e9"`},
	}
	for _, tt := range tests {
		_, err := ParseHostfile("hosts", strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseHostfile(%q) = %v, want error containing %q", tt.in, err, tt.want)
		}
		var pe *ParseError
		if err != nil && !errors.As(err, &pe) {
			t.Errorf("ParseHostfile(%q): error %T is not a *ParseError", tt.in, err)
		}
	}
}

func TestParseHostList(t *testing.T) {
	got, err := ParseHostList("a:4, b ,[::1]:2,a")
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{"a", 5, 0, 0}, {"b", 1, 0, 0}, {"::1", 2, 0, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for in, msg := range map[string]string{"a,,b": "-H:2: empty host", "a:0": "-H:1: slots: must be at least 1", "a:b:c": "-H:1: IPv6"} {
		if _, err := ParseHostList(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseHostList(%q) = %v, want %q", in, err, msg)
		}
	}
}

// FuzzParseHostfile checks that the parser never panics, and that whatever
// it accepts is well formed and survives a round trip through the Open MPI
// format.
func FuzzParseHostfile(f *testing.F) {
	for _, s := range []string{"a slots=2\nb:3\n", "[::1] slots=2 max_slots=4 # x\n", "a\na\n", "x slots=\n", "[", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hosts, err := ParseHostfile("f", strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		var b strings.Builder
		for _, h := range hosts {
			if h.Name == "" || h.Slots < 1 || h.Slots > maxSlotCount || h.MaxSlots < 0 {
				t.Fatalf("bad host %+v", h)
			}
			name := h.Name
			if strings.Contains(name, ":") {
				name = "[" + name + "]"
			}
			b.WriteString(name + " slots=" + strconv.Itoa(h.Slots))
			if h.MaxSlots > 0 {
				b.WriteString(" max_slots=" + strconv.Itoa(h.MaxSlots))
			}
			b.WriteString("\n")
		}
		again, err := ParseHostfile("g", strings.NewReader(b.String()))
		if err != nil {
			// Merging a repeated host may push max_slots below the summed slots.
			if strings.Contains(err.Error(), "max_slots") {
				return
			}
			t.Fatalf("round trip of %q failed: %v", b.String(), err)
		}
		if !reflect.DeepEqual(again, hosts) {
			t.Fatalf("round trip changed %+v into %+v", hosts, again)
		}
	})
}

// TestHostfileExample keeps the shipped example valid.
func TestHostfileExample(t *testing.T) {
	f, err := os.Open("../hostfile.example")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hosts, err := ParseHostfile("hostfile.example", f)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 6 || hosts[0].Slots != 6 || hosts[1].MaxSlots != 8 || hosts[4].Name != "fe80::1" || hosts[5].Speed != 2.5 {
		t.Fatalf("unexpected hosts %+v", hosts)
	}
}
