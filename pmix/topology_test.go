package pmix

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// machine describes a synthetic machine, from which synth makes the /sys
// (and /proc) Linux would show for it and expect says what its topology
// is, each on its own: the test is that the reader, given the first,
// finds the second.
type machine struct {
	packages, dies, cores, threads int // dies per package, cores per die, threads per core
	// spread: thread t of core k is CPU t*ncores+k (siblings far apart,
	// as Intel's numbering); otherwise k*threads+t.
	spread      bool
	clusters    int  // cores per cluster (cluster_cpus), 0 or 1: none
	numa        int  // NUMA nodes per package, splitting its cores; 0: no node directory
	cpuless     int  // more NUMA nodes, without CPUs
	caches      bool // L1d, L1i, L2 per core, L3 per die
	l2PerCluste bool // the L2 is the cluster's, not the core's
	oldNames    bool // thread_siblings and core_siblings (before Linux 5.3)
	offline     []int
	cgroupCPUs  string // the cgroup's cpuset.cpus.effective ("": no cgroup files)
}

func (m machine) ncores() int { return m.packages * m.dies * m.cores }
func (m machine) ncpus() int  { return m.ncores() * m.threads }

// cpu is the CPU number of thread t of core k (k counts across the
// machine).
func (m machine) cpu(k, t int) int {
	if m.spread {
		return t*m.ncores() + k
	}
	return k*m.threads + t
}

func (m machine) online(c int) bool { return !slices.Contains(m.offline, c) }

// coreCPUs is core k's online CPUs.
func (m machine) coreCPUs(k int) []int {
	var r []int
	for t := 0; t < m.threads; t++ {
		if c := m.cpu(k, t); m.online(c) {
			r = append(r, c)
		}
	}
	return r
}

// span is the online CPUs of cores [k0, k1).
func (m machine) span(k0, k1 int) []int {
	var r []int
	for k := k0; k < k1; k++ {
		r = append(r, m.coreCPUs(k)...)
	}
	slices.Sort(r)
	return r
}

func (m machine) coresPerPackage() int { return m.dies * m.cores }

// nodeCores is NUMA node n's cores [k0, k1) (n below packages*numa).
func (m machine) nodeCores(n int) (int, int) {
	per := m.coresPerPackage() / m.numa
	return n * per, (n + 1) * per
}

func (m machine) nnodes() int {
	if m.numa == 0 {
		return 1
	}
	return m.packages*m.numa + m.cpuless
}

// mask is cpus as the kernel writes a bitmap: 32-bit words in hex, most
// significant first, the first without leading zeros.
func mask(cpus []int) string {
	n := 1
	for _, c := range cpus {
		n = max(n, c/32+1)
	}
	w := make([]uint32, n)
	for _, c := range cpus {
		w[c/32] |= 1 << (uint(c) % 32)
	}
	parts := []string{fmt.Sprintf("%x", w[n-1])}
	for i := n - 2; i >= 0; i-- {
		parts = append(parts, fmt.Sprintf("%08x", w[i]))
	}
	return strings.Join(parts, ",") + "\n"
}

func list(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",") + "\n"
}

const synthMemKB = 1 << 20 // each node's MemTotal, kB

// synth is the machine's /sys and /proc, as Linux shows them.
func (m machine) synth() fstest.MapFS {
	fsys := fstest.MapFS{}
	put := func(name, text string) { fsys[name] = &fstest.MapFile{Data: []byte(text), Mode: 0o444} }
	var online []int
	for c := 0; c < m.ncpus(); c++ {
		if m.online(c) {
			online = append(online, c)
		}
	}
	put(cpuDir+"/online", list(online))
	put(cpuDir+"/possible", fmt.Sprintf("0-%d\n", m.ncpus()-1))
	put(cpuDir+"/kernel_max", "8191\n")
	coreFile, pkgFile := "core_cpus", "package_cpus"
	if m.oldNames {
		coreFile, pkgFile = "thread_siblings", "core_siblings"
	}
	for k := 0; k < m.ncores(); k++ {
		pkg, die := k/m.coresPerPackage(), k/m.cores
		pk0 := pkg * m.coresPerPackage()
		for t := 0; t < m.threads; t++ {
			c := m.cpu(k, t)
			d := fmt.Sprintf("%s/cpu%d", cpuDir, c)
			if !m.online(c) {
				put(d+"/online", "0\n")
				continue
			}
			put(d+"/online", "1\n")
			topo := d + "/topology/"
			put(topo+coreFile, mask(m.coreCPUs(k)))
			put(topo+"core_id", strconv.Itoa(k%m.cores)+"\n")
			put(topo+pkgFile, mask(m.span(pk0, pk0+m.coresPerPackage())))
			put(topo+"physical_package_id", strconv.Itoa(pkg)+"\n")
			put(topo+"die_id", strconv.Itoa(die%m.dies)+"\n")
			put(topo+"die_cpus", mask(m.span(die*m.cores, (die+1)*m.cores)))
			cl0, cl1 := k, k+1
			if m.clusters > 1 {
				cl0 = k / m.clusters * m.clusters
				cl1 = cl0 + m.clusters
			}
			put(topo+"cluster_id", strconv.Itoa(cl0)+"\n")
			put(topo+"cluster_cpus", mask(m.span(cl0, cl1)))
			if !m.caches {
				continue
			}
			l2 := m.coreCPUs(k)
			if m.l2PerCluste {
				l2 = m.span(cl0, cl1)
			}
			for j, ca := range []struct {
				level int
				typ   string
				kB    int
				ways  int
				cpus  []int
				id    int
			}{
				{1, "Data", 48, 12, m.coreCPUs(k), k},
				{1, "Instruction", 32, 8, m.coreCPUs(k), k},
				{2, "Unified", 2048, 16, l2, cl0},
				{3, "Unified", 32768, 16, m.span(die*m.cores, (die+1)*m.cores), die},
			} {
				cd := fmt.Sprintf("%s/cache/index%d/", d, j)
				put(cd+"level", strconv.Itoa(ca.level)+"\n")
				put(cd+"type", ca.typ+"\n")
				put(cd+"size", strconv.Itoa(ca.kB)+"K\n")
				put(cd+"coherency_line_size", "64\n")
				put(cd+"ways_of_associativity", strconv.Itoa(ca.ways)+"\n")
				put(cd+"number_of_sets", strconv.Itoa(ca.kB*1024/64/ca.ways)+"\n")
				put(cd+"physical_line_partition", "1\n")
				put(cd+"shared_cpu_map", mask(ca.cpus))
				put(cd+"shared_cpu_list", list(ca.cpus))
				put(cd+"id", strconv.Itoa(ca.id)+"\n")
			}
		}
	}
	if m.numa == 0 {
		put("proc/meminfo", fmt.Sprintf("MemTotal:       %d kB\nMemFree:        1 kB\n", synthMemKB*2))
	} else {
		var ids []int
		for n := 0; n < m.nnodes(); n++ {
			ids = append(ids, n)
		}
		put(nodeDir+"/online", list(ids))
		put(nodeDir+"/possible", list(ids))
		for n := range ids {
			d := fmt.Sprintf("%s/node%d/", nodeDir, n)
			var cpus []int
			if n < m.packages*m.numa {
				cpus = m.span(m.nodeCores(n))
			}
			put(d+"cpumap", mask(cpus))
			put(d+"cpulist", list(cpus))
			put(d+"meminfo", fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        1 kB\n", n, synthMemKB, n))
			put(d+"hugepages/hugepages-2048kB/nr_hugepages", "8\n")
			put(d+"hugepages/hugepages-1048576kB/nr_hugepages", "0\n")
			var dist []string
			for o := range ids {
				switch {
				case o == n:
					dist = append(dist, "10")
				case n/max(m.numa, 1) == o/max(m.numa, 1):
					dist = append(dist, "12")
				default:
					dist = append(dist, "21")
				}
			}
			put(d+"distance", strings.Join(dist, " ")+"\n")
		}
	}
	if m.cgroupCPUs != "" {
		put("proc/self/cgroup", "0::/job\n")
		put("proc/mounts", "sysfs /sys sysfs rw,nosuid 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev 0 0\n")
		put("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory\n")
		put("sys/fs/cgroup/cpuset.cpus.effective", list(online))
		put("sys/fs/cgroup/job/cpuset.cpus.effective", m.cgroupCPUs+"\n")
	}
	return fsys
}

// expectation is what the machine's topology is.
type expectation struct {
	pus      []int
	cores    [][]int // each core's online CPUs
	packages [][]int
	nodes    [][]int // each NUMA node's CPUs, by node number
	caches   map[string]int
	allowed  []int
}

func (m machine) expect() expectation {
	var e expectation
	e.caches = map[string]int{}
	for c := 0; c < m.ncpus(); c++ {
		if m.online(c) {
			e.pus = append(e.pus, c)
		}
	}
	for k := 0; k < m.ncores(); k++ {
		if cs := m.coreCPUs(k); len(cs) > 0 {
			e.cores = append(e.cores, cs)
		}
	}
	for p := 0; p < m.packages; p++ {
		e.packages = append(e.packages, m.span(p*m.coresPerPackage(), (p+1)*m.coresPerPackage()))
	}
	if m.numa == 0 {
		e.nodes = [][]int{e.pus}
	} else {
		for n := 0; n < m.nnodes(); n++ {
			var cpus []int
			if n < m.packages*m.numa {
				cpus = m.span(m.nodeCores(n))
			}
			e.nodes = append(e.nodes, cpus)
		}
	}
	if m.caches {
		e.caches["L1Cache"] = len(e.cores)
		e.caches["L1iCache"] = len(e.cores)
		e.caches["L2Cache"] = len(e.cores)
		if m.l2PerCluste && m.clusters > 1 {
			e.caches["L2Cache"] = m.ncores() / m.clusters
		}
		e.caches["L3Cache"] = m.packages * m.dies
	}
	e.allowed = e.pus
	if m.cgroupCPUs != "" {
		s, err := parseCPUList(m.cgroupCPUs)
		if err != nil {
			panic(err)
		}
		e.allowed = s.and(mustSet(e.pus)).members()
	}
	return e
}

func mustSet(cpus []int) cpuset {
	var s cpuset
	for _, c := range cpus {
		s.set(c)
	}
	return s
}

// machines are the shapes the tests read.
var machines = map[string]machine{
	"1 socket 2 cores":          {packages: 1, dies: 1, cores: 2, threads: 1, numa: 1, caches: true},
	"2 sockets SMT":             {packages: 2, dies: 1, cores: 4, threads: 2, spread: true, numa: 1, caches: true},
	"2 sockets SMT contiguous":  {packages: 2, dies: 1, cores: 3, threads: 2, numa: 1, caches: true},
	"sub-NUMA and memory nodes": {packages: 2, dies: 1, cores: 4, threads: 2, numa: 2, cpuless: 2, caches: true},
	"a memory node":             {packages: 1, dies: 1, cores: 2, threads: 2, numa: 1, cpuless: 1, caches: true},
	"2 dies per package":        {packages: 1, dies: 2, cores: 2, threads: 2, numa: 1, caches: true},
	"clusters sharing L2":       {packages: 1, dies: 1, cores: 8, threads: 1, clusters: 4, l2PerCluste: true, numa: 1, caches: true},
	"clusters of cores":         {packages: 1, dies: 1, cores: 8, threads: 1, clusters: 2, numa: 1, caches: true},
	"no cache information":      {packages: 2, dies: 1, cores: 2, threads: 2, numa: 1},
	"no NUMA, old file names":   {packages: 1, dies: 1, cores: 4, threads: 2, oldNames: true, caches: true},
	"offline CPUs":              {packages: 2, dies: 1, cores: 2, threads: 2, spread: true, numa: 1, caches: true, offline: []int{3, 6}},
	"cgroup of some CPUs":       {packages: 2, dies: 1, cores: 2, threads: 2, numa: 1, caches: true, cgroupCPUs: "1-2,5,40"},
	"many CPUs":                 {packages: 2, dies: 1, cores: 40, threads: 2, spread: true, numa: 2, caches: true},
}

// xmlObject is an object of hwloc's XML, as encoding/xml reads it.
type xmlObject struct {
	Type     string      `xml:"type,attr"`
	OSIndex  *int        `xml:"os_index,attr"`
	CPUSet   string      `xml:"cpuset,attr"`
	Complete string      `xml:"complete_cpuset,attr"`
	Allowed  string      `xml:"allowed_cpuset,attr"`
	NodeSet  string      `xml:"nodeset,attr"`
	GP       int         `xml:"gp_index,attr"`
	Subtype  string      `xml:"subtype,attr"`
	Memory   uint64      `xml:"local_memory,attr"`
	Size     uint64      `xml:"cache_size,attr"`
	Line     int         `xml:"cache_linesize,attr"`
	Depth    int         `xml:"depth,attr"`
	Pages    []xmlPage   `xml:"page_type"`
	Children []xmlObject `xml:"object"`
}

type xmlPage struct {
	Size  uint64 `xml:"size,attr"`
	Count uint64 `xml:"count,attr"`
}

type xmlTopology struct {
	XMLName   xml.Name    `xml:"topology"`
	Version   string      `xml:"version,attr"`
	Root      []xmlObject `xml:"object"`
	Distances []struct {
		NbObjs  int      `xml:"nbobjs,attr"`
		Indexes []string `xml:"indexes"`
		Values  []string `xml:"u64values"`
	} `xml:"distances2"`
}

// parseHwlocSet reads a set as hwloc writes it (the reverse of String).
func parseHwlocSet(t *testing.T, text string) []int {
	t.Helper()
	words := strings.Split(text, ",")
	var s cpuset
	for i, w := range words {
		if w == "" {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(w, "0x"), 16, 32)
		if err != nil {
			t.Fatalf("set %q: %v", text, err)
		}
		base := 32 * (len(words) - 1 - i)
		for b := 0; b < 32; b++ {
			if v&(1<<b) != 0 {
				s.set(base + b)
			}
		}
	}
	return s.members()
}

// flatten lists the objects of the XML tree, each with its parent's type.
func flattenXML(o xmlObject, parent string, out *[]struct {
	o      xmlObject
	parent string
}) {
	*out = append(*out, struct {
		o      xmlObject
		parent string
	}{o, parent})
	for _, c := range o.Children {
		flattenXML(c, o.Type, out)
	}
}

func readSynth(t *testing.T, m machine) (*topology, string) {
	t.Helper()
	topo, err := readTopology(m.synth(), 4096)
	if err != nil {
		t.Fatalf("readTopology: %v", err)
	}
	return topo, topo.xml()
}

// TestTopologySynthetic: for each machine, the XML parses as XML, and its
// PUs, cores, packages, NUMA nodes, caches and allowed CPUs are the
// machine's; every object's cpuset is within its parent's and holds its
// children's, and gp indexes are distinct.
func TestTopologySynthetic(t *testing.T) {
	for name, m := range machines {
		t.Run(name, func(t *testing.T) {
			_, text := readSynth(t, m)
			var doc xmlTopology
			if err := xml.Unmarshal([]byte(text), &doc); err != nil {
				t.Fatalf("the XML does not parse: %v\n%s", err, text)
			}
			if doc.Version != "2.0" || len(doc.Root) != 1 || doc.Root[0].Type != "Machine" {
				t.Fatalf("version %q, %d roots", doc.Version, len(doc.Root))
			}
			e := m.expect()
			root := doc.Root[0]
			if got := parseHwlocSet(t, root.CPUSet); !slices.Equal(got, e.pus) {
				t.Errorf("machine cpuset %v, want %v", got, e.pus)
			}
			if got := parseHwlocSet(t, root.Allowed); !slices.Equal(got, e.allowed) {
				t.Errorf("allowed cpuset %v, want %v", got, e.allowed)
			}
			var all []struct {
				o      xmlObject
				parent string
			}
			flattenXML(root, "", &all)
			byType := map[string][][]int{}
			gps := map[int]bool{}
			var check func(o xmlObject)
			check = func(o xmlObject) {
				set := mustSet(parseHwlocSet(t, o.CPUSet))
				var union cpuset
				for _, c := range o.Children {
					cs := mustSet(parseHwlocSet(t, c.CPUSet))
					if !cs.within(set) {
						t.Errorf("%s %s holds %s %s, which is not within it", o.Type, o.CPUSet, c.Type, c.CPUSet)
					}
					if c.Type != "NUMANode" {
						if union.intersects(cs) {
							t.Errorf("children of %s %s overlap", o.Type, o.CPUSet)
						}
						union = union.or(cs)
					}
					check(c)
				}
				if len(o.Children) > 0 && o.Type != "NUMANode" && !union.equal(set) && hasNormal(o) {
					t.Errorf("%s %s: its children hold %s", o.Type, o.CPUSet, union)
				}
			}
			check(root)
			for _, x := range all {
				if gps[x.o.GP] || x.o.GP <= 0 {
					t.Errorf("gp_index %d twice or not positive", x.o.GP)
				}
				gps[x.o.GP] = true
				byType[x.o.Type] = append(byType[x.o.Type], parseHwlocSet(t, x.o.CPUSet))
			}
			var pus []int
			for _, s := range byType["PU"] {
				pus = append(pus, s...)
			}
			slices.Sort(pus)
			if !slices.Equal(pus, e.pus) {
				t.Errorf("PUs %v, want %v", pus, e.pus)
			}
			if !sameSetsOf(byType["Core"], e.cores) {
				t.Errorf("cores %v, want %v", byType["Core"], e.cores)
			}
			if !sameSetsOf(byType["Package"], e.packages) {
				t.Errorf("packages %v, want %v", byType["Package"], e.packages)
			}
			var nodes [][]int
			var memory uint64
			for _, x := range all {
				if x.o.Type == "NUMANode" {
					nodes = append(nodes, parseHwlocSet(t, x.o.CPUSet))
					memory += x.o.Memory
					if len(x.o.Pages) == 0 || x.o.Pages[0].Size != 4096 {
						t.Errorf("NUMA node %v: pages %v", *x.o.OSIndex, x.o.Pages)
					}
				}
			}
			if !sameSetsOf(nodes, e.nodes) {
				t.Errorf("NUMA nodes %v, want %v", nodes, e.nodes)
			}
			if want := uint64(len(e.nodes)) * synthMemKB << 10; m.numa == 0 && memory != 2*synthMemKB<<10 || m.numa > 0 && memory != want {
				t.Errorf("memory %d in all", memory)
			}
			for _, typ := range []string{"L1Cache", "L1iCache", "L2Cache", "L3Cache"} {
				if got := len(byType[typ]); got != e.caches[typ] {
					t.Errorf("%d %s, want %d", got, typ, e.caches[typ])
				}
			}
			if len(e.nodes) >= 2 && m.numa > 0 {
				if len(doc.Distances) != 1 || doc.Distances[0].NbObjs != len(e.nodes) {
					t.Errorf("distances: %+v", doc.Distances)
				}
			} else if len(doc.Distances) != 0 {
				t.Errorf("distances for %d nodes", len(e.nodes))
			}
		})
	}
}

func hasNormal(o xmlObject) bool {
	for _, c := range o.Children {
		if c.Type != "NUMANode" {
			return true
		}
	}
	return false
}

// sameSetsOf reports whether a and b hold the same sets, in any order.
func sameSetsOf(a, b [][]int) bool {
	key := func(s [][]int) []string {
		var k []string
		for _, x := range s {
			k = append(k, fmt.Sprint(x))
		}
		slices.Sort(k)
		return k
	}
	return slices.Equal(key(a), key(b))
}

// TestTopologyRefused: /sys that is unreadable, contradictory or too
// large gives an error (the server then serves no topology), never a
// panic or a topology.
func TestTopologyRefused(t *testing.T) {
	base := machines["2 sockets SMT"]
	cases := map[string]func(fstest.MapFS){
		"no cpu directory": func(f fstest.MapFS) {
			for k := range f {
				if strings.HasPrefix(k, cpuDir) {
					delete(f, k)
				}
			}
		},
		"no topology files": func(f fstest.MapFS) {
			for k := range f {
				if strings.Contains(k, "/topology/core_cpus") || strings.Contains(k, "/topology/package_cpus") {
					delete(f, k)
				}
			}
		},
		"garbage core mask":   func(f fstest.MapFS) { f[cpuDir+"/cpu1/topology/core_cpus"].Data = []byte("zz\n") },
		"garbage online list": func(f fstest.MapFS) { f[cpuDir+"/online"].Data = []byte("3-1\n") },
		"huge CPU number":     func(f fstest.MapFS) { f[cpuDir+"/online"].Data = []byte("0-99999999\n") },
		"huge mask": func(f fstest.MapFS) {
			f[cpuDir+"/cpu0/topology/core_cpus"].Data = []byte(strings.Repeat("ffffffff,", 5000) + "1")
		},
		"oversized file":        func(f fstest.MapFS) { f[cpuDir+"/cpu0/topology/core_id"].Data = make([]byte, maxSysFile+1) },
		"core without its CPU":  func(f fstest.MapFS) { f[cpuDir+"/cpu0/topology/core_cpus"].Data = []byte("2\n") },
		"garbage NUMA map":      func(f fstest.MapFS) { f[nodeDir+"/node0/cpumap"].Data = []byte("0x-1\n") },
		"overlapping NUMA":      func(f fstest.MapFS) { f[nodeDir+"/node1/cpumap"].Data = f[nodeDir+"/node0/cpumap"].Data },
		"garbage meminfo":       func(f fstest.MapFS) { f[nodeDir+"/node0/meminfo"].Data = []byte("Node 0 MemTotal: lots kB\n") },
		"garbage cache level":   func(f fstest.MapFS) { f[cpuDir+"/cpu0/cache/index0/level"].Data = []byte("one\n") },
		"cache across packages": func(f fstest.MapFS) { f[cpuDir+"/cpu0/cache/index2/shared_cpu_map"].Data = []byte("00000011\n") },
		"siblings of other cores": func(f fstest.MapFS) {
			f[cpuDir+"/cpu8/topology/core_id"].Data = []byte("7\n")
		},
		"no NUMA node online": func(f fstest.MapFS) { f[nodeDir+"/online"].Data = []byte("\n") },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			f := base.synth()
			change(f)
			topo, err := readTopology(f, 4096)
			if err == nil {
				t.Fatalf("read a topology:\n%s", topo.xml())
			}
			t.Log(err)
		})
	}
}

// TestTopologyOptional: files hwloc does without (ids, cache attributes,
// distances, meminfo) missing or odd leave a topology with the rest.
func TestTopologyOptional(t *testing.T) {
	f := machines["2 sockets SMT"].synth()
	delete(f, cpuDir+"/cpu0/topology/core_id")
	delete(f, cpuDir+"/cpu1/cache/index0/size")
	delete(f, cpuDir+"/cpu2/cache/index3/number_of_sets")
	f[nodeDir+"/node1/distance"].Data = []byte("10\n")
	delete(f, nodeDir+"/node0/meminfo")
	topo, err := readTopology(f, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if topo.distances != nil {
		t.Errorf("distances from a short row: %v", topo.distances)
	}
	if n := topo.numa[0]; n.memory != 0 || len(n.pages) == 0 || n.pages[0].count != 0 {
		t.Errorf("node 0 without meminfo: memory %d, pages %v", n.memory, n.pages)
	}
	if !strings.Contains(topo.xml(), `type="Core" cpuset`) {
		t.Errorf("no core without an os_index")
	}
}

// TestCPUSetString: sets print as hwloc_bitmap_asprintf does, and read
// back.
func TestCPUSetString(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{nil, "0x0"},
		{[]int{0}, "0x00000001"},
		{[]int{0, 1}, "0x00000003"},
		{[]int{32}, "0x00000001,0x0"},
		{[]int{33, 0}, "0x00000002,0x00000001"},
		{[]int{64}, "0x00000001,,0x0"},
		{[]int{95, 1}, "0x80000000,,0x00000002"},
		{[]int{128, 32}, "0x00000001,,,0x00000001,0x0"},
	} {
		s := mustSet(c.cpus)
		if got := s.String(); got != c.want {
			t.Errorf("%v: %q, want %q", c.cpus, got, c.want)
		}
		back := mustSet(parseHwlocSet(t, s.String()))
		if !back.equal(s) {
			t.Errorf("%v: read back as %v", c.cpus, back.members())
		}
	}
}

// FuzzCPUList: the kernel's list and mask parsers never panic, never
// accept a number at or above maxCPUs, and a list they accept prints and
// reads back the same.
func FuzzCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8,10-11\n", "", "5", "0-65535", "1-0", "ff,00000001", "00000000,00000003\n", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := parseCPUList(s); err == nil {
			if len(l) > maxCPUs/64 {
				t.Fatalf("%q: %d words", s, len(l))
			}
			again, err := parseCPUList(list(l.members()))
			if err != nil || !again.equal(l) {
				t.Fatalf("%q: %v, again %v (%v)", s, l.members(), again.members(), err)
			}
		}
		if m, err := parseCPUMask(s); err == nil {
			if len(m) > maxCPUs/64 {
				t.Fatalf("%q: %d words", s, len(m))
			}
			again, err := parseCPUMask(mask(m.members()))
			if err != nil || !again.equal(m) {
				t.Fatalf("%q: %v, again %v (%v)", s, m.members(), again.members(), err)
			}
		}
	})
}

// writeTree writes fsys below dir (for hwloc's HWLOC_FSROOT).
func writeTree(t *testing.T, fsys fstest.MapFS, dir string) {
	t.Helper()
	for name, f := range fsys {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
