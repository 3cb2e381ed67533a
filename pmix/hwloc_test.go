package pmix

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Real hwloc against the topology this package writes: a C program on
// the system's hwloc (the one Open MPI 5 and libpmix link) loads the XML
// as Open MPI does (hwloc_topology_set_xmlbuffer, IS_THISSYSTEM, I/O
// filter as PMIx sets it), discovers the same machine itself, and prints
// what each found; the two must agree object by object.

const hwlocSrc = `#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* hwcmp discover | hwcmp xml FILE: the topology, one object a line. */
static void show(hwloc_topology_t t) {
    int depth = hwloc_topology_get_depth(t);
    for (int d = 0; d < depth; d++) {
        int n = hwloc_get_nbobjs_by_depth(t, d);
        printf("depth %d: %d %s\n", d, n, n ? hwloc_obj_type_string(hwloc_get_obj_by_depth(t, d, 0)->type) : "-");
        for (int i = 0; i < n; i++) {
            hwloc_obj_t o = hwloc_get_obj_by_depth(t, d, i);
            char *cs, *ns;
            hwloc_bitmap_asprintf(&cs, o->cpuset);
            hwloc_bitmap_asprintf(&ns, o->nodeset);
            printf("  %s os=%d cpuset=%s nodeset=%s subtype=%s", hwloc_obj_type_string(o->type), (int)o->os_index, cs, ns, o->subtype ? o->subtype : "-");
            if (hwloc_obj_type_is_cache(o->type))
                printf(" size=%llu line=%u assoc=%d type=%d", (unsigned long long)o->attr->cache.size,
                       o->attr->cache.linesize, o->attr->cache.associativity, (int)o->attr->cache.type);
            printf("\n");
            free(cs);
            free(ns);
        }
    }
    for (hwloc_obj_t o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, NULL); o; o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, o)) {
        char *cs;
        hwloc_bitmap_asprintf(&cs, o->cpuset);
        printf("numa %u cpuset=%s memory=%llu under %s", o->os_index, cs, (unsigned long long)o->attr->numanode.local_memory, hwloc_obj_type_string(o->parent->type));
        for (unsigned i = 0; i < o->attr->numanode.page_types_len; i++)
            printf(" pages %llu x %llu", (unsigned long long)o->attr->numanode.page_types[i].count, (unsigned long long)o->attr->numanode.page_types[i].size);
        printf("\n");
        free(cs);
    }
    printf("io bridges=%d pci=%d osdev=%d\n", hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_BRIDGE),
           hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PCI_DEVICE), hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_OS_DEVICE));
    char *a;
    hwloc_bitmap_asprintf(&a, hwloc_topology_get_allowed_cpuset(t));
    printf("allowed cpuset %s\n", a);
    free(a);
    hwloc_bitmap_asprintf(&a, hwloc_topology_get_allowed_nodeset(t));
    printf("allowed nodeset %s\n", a);
    free(a);
    unsigned nr = 1;
    struct hwloc_distances_s *dist;
    if (hwloc_distances_get_by_type(t, HWLOC_OBJ_NUMANODE, &nr, &dist, HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) == 0 && nr == 1) {
        printf("distances %s:", dist->nbobjs ? "NUMA" : "-");
        for (unsigned i = 0; i < dist->nbobjs * dist->nbobjs; i++)
            printf(" %llu", (unsigned long long)dist->values[i]);
        printf("\n");
        hwloc_distances_release(t, dist);
    }
}
int main(int argc, char **argv) {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) return 2;
    /* what PMIx's set_flags and Open MPI do before loading */
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (argc > 2 && strcmp(argv[1], "xml") == 0) {
        FILE *f = fopen(argv[2], "r");
        if (f == NULL) return 2;
        static char buf[1 << 24];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        if (hwloc_topology_set_xmlbuffer(t, buf, (int)n + 1) != 0) { printf("set_xmlbuffer failed\n"); return 1; }
        hwloc_topology_set_flags(t, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
    }
    if (hwloc_topology_load(t) != 0) { printf("load failed\n"); return 1; }
    show(t);
    hwloc_topology_destroy(t);
    return 0;
}
`

// buildHwloc compiles the comparison program, or skips (fails with
// GORUN_REQUIRE_OPENMPI5=1) where hwloc's header or library is missing.
func buildHwloc(t *testing.T) string {
	t.Helper()
	need := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("GORUN_REQUIRE_OPENMPI5") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if _, err := os.Stat("/usr/include/hwloc.h"); err != nil {
		need("no hwloc.h (apt-get install libhwloc-dev, which libopenmpi-dev brings): %v", err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		need("no gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "hwcmp.c")
	if err := os.WriteFile(src, []byte(hwlocSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hwcmp")
	if b, err := exec.Command("gcc", "-O1", "-o", bin, src, "-lhwloc").CombinedOutput(); err != nil {
		need("gcc with hwloc: %v\n%s", err, b)
	}
	return bin
}

// hwloc runs the comparison program with env (and no other HWLOC_
// variable) and returns what it printed.
func hwloc(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HWLOC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hwcmp %v: %v\n%s%s", args, err, out, stderr.String())
	}
	if stderr.Len() > 0 {
		// hwloc complains on stderr about what it corrected (children
		// out of order, overlapping sets): the XML is then not as hwloc
		// writes it, whatever it loaded.
		t.Errorf("hwloc %v said:\n%s", args, stderr.String())
	}
	return string(out)
}

// withoutIO is hwcmp's output without its line of I/O objects (PCI
// devices, bridges, OS devices), and that line.
func withoutIO(out string) (string, string) {
	var keep []string
	io := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "io ") {
			io = l
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n"), io
}

// sameTopology fails unless hwloc's two views agree, showing the lines
// that differ. I/O objects are left out of the comparison: the XML has
// none (doc.go), where hwloc's own discovery finds the machine's PCI
// devices; they are logged.
func sameTopology(t *testing.T, discovered, fromXML, xml string) {
	t.Helper()
	discovered, dio := withoutIO(discovered)
	fromXML, xio := withoutIO(fromXML)
	t.Logf("I/O objects: discovered %q, from the XML %q", dio, xio)
	if xio != "io bridges=0 pci=0 osdev=0" {
		t.Errorf("the XML brought I/O objects: %s", xio)
	}
	if discovered == fromXML {
		return
	}
	d, x := strings.Split(discovered, "\n"), strings.Split(fromXML, "\n")
	var diff []string
	for i := 0; i < max(len(d), len(x)); i++ {
		var a, b string
		if i < len(d) {
			a = d[i]
		}
		if i < len(x) {
			b = x[i]
		}
		if a != b {
			diff = append(diff, "discovered: "+a, "from XML:   "+b)
		}
	}
	if len(diff) > 40 {
		diff = diff[:40]
	}
	t.Errorf("hwloc's own discovery and the XML differ:\n%s\nthe XML:\n%s", strings.Join(diff, "\n"), xml)
}

// TestTopologyHwlocSynthetic: for each synthetic machine, hwloc's Linux
// discovery of its files (HWLOC_FSROOT; without the x86 backend, which
// would read this machine's CPUID instead) and hwloc loading the XML
// written from the same files find the same objects, sets, caches, NUMA
// memory and distances.
func TestTopologyHwlocSynthetic(t *testing.T) {
	bin := buildHwloc(t)
	for name, m := range machines {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			fsys := m.synth()
			writeTree(t, fsys, root)
			topo, err := readTopology(fsys, os.Getpagesize())
			if err != nil {
				t.Fatal(err)
			}
			xml := topo.xml()
			file := filepath.Join(t.TempDir(), "topo.xml")
			if err := os.WriteFile(file, []byte(xml), 0o644); err != nil {
				t.Fatal(err)
			}
			discovered := hwloc(t, bin, []string{"HWLOC_FSROOT=" + root, "HWLOC_COMPONENTS=-x86"}, "discover")
			sameTopology(t, discovered, hwloc(t, bin, nil, "xml", file), xml)
			if !strings.Contains(discovered, " PU os=") {
				t.Fatalf("hwloc found no PU in the synthetic tree:\n%s", discovered)
			}
		})
	}
}

// TestTopologyHwlocLocal: on this machine, hwloc loading LocalTopology's
// XML sees what its own discovery sees: the same PUs, cores (each with
// its cpuset), packages, caches and NUMA nodes.
func TestTopologyHwlocLocal(t *testing.T) {
	bin := buildHwloc(t)
	xml, err := LocalTopology()
	if err != nil {
		t.Fatalf("LocalTopology: %v", err)
	}
	file := filepath.Join(t.TempDir(), "topo.xml")
	if err := os.WriteFile(file, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	discovered := hwloc(t, bin, nil, "discover")
	sameTopology(t, discovered, hwloc(t, bin, nil, "xml", file), xml)
	for _, what := range []string{"  PU os=", "  Core os=", "  Package os=", "\nnuma "} {
		if !strings.Contains(discovered, what) {
			t.Errorf("hwloc's discovery has no %q:\n%s", strings.TrimSpace(what), discovered)
		}
	}
	t.Logf("%d bytes of XML; hwloc found:\n%s", len(xml), discovered)
}
