package pmix

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The host's topology, for Open MPI 5's ranks: read from Linux's /sys
// (and the process's cpuset cgroup) as hwloc's own Linux discovery reads
// it, and written as hwloc's XML (v2), which a rank's PMIx client and
// Open MPI load (PMIX_HWLOC_XML_V2) instead of probing /sys themselves.
// See doc.go for the contract. The reader is a pure function of a file
// system (readTopology), so that any machine's /sys can be a test.

// Limits of what the reader takes from the file system: a file larger
// than maxSysFile, or a directory of more than maxSysEntries entries, is
// not a topology it serves; no more than maxTopologyObjects objects.
const (
	maxSysFile         = 1 << 20
	maxSysEntries      = maxCPUs + 1024
	maxTopologyObjects = 1 << 20
	maxCacheIndex      = 10 // cache/index0 to index9, as hwloc reads
)

// MaxTopology caps the XML a Server serves (Config.Topology): a larger
// one is left out, and the ranks discover the topology themselves.
const MaxTopology = 16 << 20

// objType is an hwloc object type. The order of the constants is hwloc's
// order for objects of equal cpusets (obj_type_order): the earlier one is
// the parent.
type objType int

const (
	objMachine objType = iota
	objGroup
	objNUMA
	objPackage
	objDie
	objL5
	objL4
	objL3
	objL3i
	objL2
	objL2i
	objL1
	objL1i
	objCore
	objPU
)

var objTypeNames = [...]string{
	objMachine: "Machine", objGroup: "Group", objNUMA: "NUMANode", objPackage: "Package",
	objDie: "Die", objL5: "L5Cache", objL4: "L4Cache", objL3: "L3Cache", objL3i: "L3iCache",
	objL2: "L2Cache", objL2i: "L2iCache", objL1: "L1Cache", objL1i: "L1iCache",
	objCore: "Core", objPU: "PU",
}

func (t objType) String() string { return objTypeNames[t] }

func (t objType) isCache() bool { return t >= objL5 && t <= objL1i }

// Cache types and group kinds, as hwloc numbers them.
const (
	cacheUnified     = 0
	cacheData        = 1
	cacheInstruction = 2

	groupKindCluster = 222  // HWLOC_GROUP_KIND_LINUX_CLUSTER
	groupKindMemory  = 1001 // HWLOC_GROUP_KIND_MEMORY
)

// unknownIndex is hwloc's HWLOC_UNKNOWN_INDEX: no os_index.
const unknownIndex = -1

// cacheAttr is a cache's attributes.
type cacheAttr struct {
	size          uint64
	depth         int
	linesize      int
	associativity int
	kind          int // cacheUnified, cacheData, cacheInstruction
}

// pageType is a NUMA node's pages of one size.
type pageType struct{ size, count uint64 }

// object is one object of the topology tree.
type object struct {
	typ      objType
	osIndex  int
	cpus     cpuset // cpuset (and complete_cpuset, but at the root)
	nodes    cpuset // nodeset (and complete_nodeset)
	subtype  string
	kind     int // a group's kind
	cache    cacheAttr
	memory   uint64 // a NUMA node's local_memory
	pages    []pageType
	children []*object // normal children, by first CPU
	memChild []*object // NUMA nodes attached here
	parent   *object
	gpIndex  int
}

// topology is what readTopology found.
type topology struct {
	root         *object
	completeCPUs cpuset // every CPU of sys/devices/system/cpu, online or not
	allowedCPUs  cpuset // the cpuset cgroup's CPUs within the topology's
	allowedNodes cpuset
	numa         []*object // NUMA nodes by os index
	distances    []uint64  // len(numa)^2 NUMA latencies, row by row, or nil
}

// LocalTopology reads this machine's topology from /sys and the calling
// process's cpuset cgroup, and returns it as hwloc XML (v2), or an error
// if anything it needs cannot be read or does not add up.
func LocalTopology() (string, error) {
	t, err := readTopology(os.DirFS("/"), os.Getpagesize())
	if err != nil {
		return "", err
	}
	return t.xml(), nil
}

// sysReader reads a Linux root (sys/..., proc/...) with limits.
type sysReader struct {
	fsys fs.FS
}

// read returns a file's contents, at most maxSysFile bytes.
func (r sysReader) read(name string) (string, error) {
	f, err := r.fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSysFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > maxSysFile {
		return "", fmt.Errorf("%s: more than %d bytes", name, maxSysFile)
	}
	return string(b), nil
}

// exists reports whether name exists (an error other than its absence
// counts as existing, as hwloc's access() checks do for readable files).
func (r sysReader) exists(name string) bool {
	_, err := fs.Stat(r.fsys, name)
	return err == nil
}

// int reads a file holding one decimal number (leading space allowed,
// anything after the digits ignored, as strtol does).
func (r sysReader) int(name string) (int64, error) {
	s, err := r.read(name)
	if err != nil {
		return 0, err
	}
	return leadingInt(s, name)
}

func leadingInt(s, name string) (int64, error) {
	s = strings.TrimLeft(s, " \t\n")
	end := 0
	if end < len(s) && (s[end] == '-' || s[end] == '+') {
		end++
	}
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	v, err := strconv.ParseInt(s[:end], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not a number: %q", name, short(s))
	}
	return v, nil
}

func (r sysReader) mask(name string) (cpuset, error) {
	s, err := r.read(name)
	if err != nil {
		return nil, err
	}
	m, err := parseCPUMask(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

func (r sysReader) list(name string) (cpuset, error) {
	s, err := r.read(name)
	if err != nil {
		return nil, err
	}
	l, err := parseCPUList(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return l, nil
}

// numbered lists the entries of dir named prefix followed by a decimal
// number (cpu0, node1), by number.
func (r sysReader) numbered(dir, prefix string) ([]int, error) {
	d, err := r.fsys.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	rd, ok := d.(fs.ReadDirFile)
	if !ok {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	var nums []int
	seen := 0
	for {
		ents, err := rd.ReadDir(1024)
		seen += len(ents)
		if seen > maxSysEntries {
			return nil, fmt.Errorf("%s: more than %d entries", dir, maxSysEntries)
		}
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), prefix)
			if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
				continue
			}
			n, err := strconv.Atoi(rest)
			if err != nil || n >= maxCPUs {
				return nil, fmt.Errorf("%s/%s: %w", dir, e.Name(), errSetTooLarge)
			}
			nums = append(nums, n)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	sort.Ints(nums)
	return slices.Compact(nums), nil
}

const (
	cpuDir  = "sys/devices/system/cpu"
	nodeDir = "sys/devices/system/node"
)

// readTopology reads the topology of the Linux root fsys (paths without
// the leading slash: sys/devices/system/cpu, ...), as hwloc 2's Linux
// discovery finds it: PUs, cores, clusters, dies, packages and caches
// from sys/devices/system/cpu, NUMA nodes, their memory and distances
// from sys/devices/system/node (or one node of proc/meminfo's memory
// without it), and the CPUs and nodes the process may use from its
// cpuset cgroup. pageSize is the size of a normal page. It fails where
// hwloc would fall back to something else or where the files contradict
// each other: the caller then serves no topology.
func readTopology(fsys fs.FS, pageSize int) (*topology, error) {
	if pageSize <= 0 {
		return nil, fmt.Errorf("page size %d", pageSize)
	}
	r := sysReader{fsys}
	t := &topology{}
	b := &builder{}
	if err := t.readCPUs(r, b); err != nil {
		return nil, err
	}
	if err := t.readNodes(r, b, uint64(pageSize)); err != nil {
		return nil, err
	}
	t.number()
	t.allowedCPUs, t.allowedNodes = allowedSets(r, t.root.cpus, t.root.nodes)
	return t, nil
}

// builder collects objects before they make a tree.
type builder struct {
	objs []*object
}

func (b *builder) add(o *object) error {
	if len(b.objs) >= maxTopologyObjects {
		return fmt.Errorf("more than %d objects", maxTopologyObjects)
	}
	b.objs = append(b.objs, o)
	return nil
}

// readCPUs finds the PUs and what holds them, and makes the tree.
func (t *topology) readCPUs(r sysReader, b *builder) error {
	online, err := r.list(cpuDir + "/online")
	haveOnline := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	ids, err := r.numbered(cpuDir, "cpu")
	if err != nil {
		return fmt.Errorf("the list of CPUs: %w", err)
	}
	var cpus cpuset
	for _, c := range ids {
		t.completeCPUs.set(c)
		dir := fmt.Sprintf("%s/cpu%d", cpuDir, c)
		if haveOnline {
			if !online.has(c) {
				continue
			}
		} else if v, err := r.int(dir + "/online"); err == nil && v == 0 {
			continue
		}
		if !r.exists(dir + "/topology") {
			continue
		}
		cpus.set(c)
	}
	if cpus.empty() {
		return errors.New("no online CPU with topology information in " + cpuDir)
	}

	// The files' names: core_cpus and package_cpus since Linux 5.3,
	// thread_siblings and core_siblings before.
	first := cpus.first()
	coreFile, packageFile := "core_cpus", "package_cpus"
	found := false
	for _, c := range []int{0, first} {
		dir := fmt.Sprintf("%s/cpu%d/topology/", cpuDir, c)
		if r.exists(dir+"package_cpus") || r.exists(dir+"core_cpus") {
			found = true
			break
		}
		if r.exists(dir+"core_siblings") || r.exists(dir+"thread_siblings") {
			coreFile, packageFile, found = "thread_siblings", "core_siblings", true
			break
		}
	}
	if !found {
		return errors.New("no CPU topology files (core_cpus, thread_siblings) in " + cpuDir)
	}

	// optional reads a mask restricted to the topology's CPUs; a missing
	// file is no error, a malformed one is.
	optional := func(name string) (cpuset, bool, error) {
		m, err := r.mask(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		return m.and(cpus), true, nil
	}
	optionalID := func(name string) (int, error) {
		v, err := r.int(name)
		if errors.Is(err, fs.ErrNotExist) {
			return unknownIndex, nil
		}
		if err != nil {
			return 0, err
		}
		if v < 0 || v >= 1<<31 {
			return unknownIndex, nil // -1: the kernel does not know
		}
		return int(v), nil
	}

	var packages, dies []*object
	for _, c := range cpus.members() {
		topo := fmt.Sprintf("%s/cpu%d/topology/", cpuDir, c)
		notFirstOfCore, notFirstOfCluster, notFirstOfDie := false, false, false

		coreSet, ok, err := optional(topo + coreFile)
		if err != nil {
			return err
		}
		if ok {
			if !coreSet.has(c) {
				return fmt.Errorf("%s%s does not hold CPU %d", topo, coreFile, c)
			}
			id, err := optionalID(topo + "core_id")
			if err != nil {
				return err
			}
			if coreSet.weight() > 1 {
				// hwloc makes one core per thread when siblings have
				// core ids of their own (AMD's compute units), which it
				// knows from /proc/cpuinfo; a topology that leaves it
				// in doubt is not served.
				for _, s := range coreSet.members() {
					sid, err := optionalID(fmt.Sprintf("%s/cpu%d/topology/core_id", cpuDir, s))
					if err != nil {
						return err
					}
					if sid != id && sid != unknownIndex && id != unknownIndex {
						return fmt.Errorf("CPUs %d and %d share a core but have core ids %d and %d", c, s, id, sid)
					}
				}
			}
			if coreSet.first() != c {
				notFirstOfCore, notFirstOfCluster, notFirstOfDie = true, true, true
			} else if err := b.add(&object{typ: objCore, osIndex: id, cpus: coreSet}); err != nil {
				return err
			}
		}

		var clusterSet, dieSet cpuset
		if !notFirstOfCore {
			s, ok, err := optional(topo + "cluster_cpus")
			if err != nil {
				return err
			}
			if ok && s.weight() > 1 {
				if s.first() == c {
					clusterSet = s
				} else {
					notFirstOfCluster, notFirstOfDie = true, true
				}
			}
		}
		if !notFirstOfCluster {
			s, ok, err := optional(topo + "die_cpus")
			if err != nil {
				return err
			}
			if ok && s.weight() > 1 {
				if s.first() == c {
					dieSet = s
				} else {
					notFirstOfDie = true
				}
			}
			if clusterSet != nil && dieSet != nil && clusterSet.equal(dieSet) {
				clusterSet = nil
			}
		}
		if !notFirstOfDie {
			s, ok, err := optional(topo + packageFile)
			if err != nil {
				return err
			}
			if ok {
				if clusterSet != nil && clusterSet.equal(s) {
					clusterSet = nil
				}
				if s.first() == c {
					id, err := optionalID(topo + "physical_package_id")
					if err != nil {
						return err
					}
					p := &object{typ: objPackage, osIndex: id, cpus: s}
					packages = append(packages, p)
					if err := b.add(p); err != nil {
						return err
					}
				}
			}
		}
		if clusterSet != nil {
			id, err := optionalID(topo + "cluster_id")
			if err != nil {
				return err
			}
			if err := b.add(&object{typ: objGroup, osIndex: id, cpus: clusterSet, subtype: "Cluster", kind: groupKindCluster}); err != nil {
				return err
			}
		}
		if dieSet != nil {
			id, err := optionalID(topo + "die_id")
			if err != nil {
				return err
			}
			dies = append(dies, &object{typ: objDie, osIndex: id, cpus: dieSet})
		}
		var pu cpuset
		pu.set(c)
		if err := b.add(&object{typ: objPU, osIndex: c, cpus: pu}); err != nil {
			return err
		}
		if err := readCaches(r, b, c, cpus, coreSet); err != nil {
			return err
		}
	}

	// A die per package is no level of its own (hwloc merges a Die level
	// identical to the Package level).
	if !sameSets(dies, packages) {
		for _, d := range dies {
			if err := b.add(d); err != nil {
				return err
			}
		}
	}

	t.root = &object{typ: objMachine, osIndex: 0, cpus: cpus}
	for _, o := range b.objs {
		if err := insert(t.root, o); err != nil {
			return err
		}
	}
	return nil
}

// sameSets reports whether dies and packages have the same cpusets, one
// for one.
func sameSets(dies, packages []*object) bool {
	if len(dies) != len(packages) {
		return false
	}
	for _, d := range dies {
		ok := false
		for _, p := range packages {
			if d.cpus.equal(p.cpus) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// readCaches adds the caches CPU c is the first of.
func readCaches(r sysReader, b *builder, c int, cpus, coreSet cpuset) error {
	for j := 0; j < maxCacheIndex; j++ {
		dir := fmt.Sprintf("%s/cpu%d/cache/index%d/", cpuDir, c, j)
		set, err := r.mask(dir + "shared_cpu_map")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if set.empty() && coreSet != nil {
			set = coreSet // as hwloc does for ia64's empty maps
		}
		set = set.and(cpus)
		if set.first() != c {
			continue
		}
		level, err := r.int(dir + "level")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		kind := cacheUnified
		if s, err := r.read(dir + "type"); err == nil {
			switch {
			case strings.HasPrefix(s, "Data"):
				kind = cacheData
			case strings.HasPrefix(s, "Instruction"):
				kind = cacheInstruction
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		typ, ok := cacheType(int(level), kind)
		if !ok {
			continue
		}
		num := func(name string, def int64) (uint64, error) {
			v, err := r.int(dir + name)
			if errors.Is(err, fs.ErrNotExist) {
				return uint64(def), nil
			}
			if err != nil {
				return 0, err
			}
			if v < 0 || v > 1<<40 {
				return 0, fmt.Errorf("%s%s: %d", dir, name, v)
			}
			return uint64(v), nil
		}
		kB, err := num("size", 0)
		if err != nil {
			return err
		}
		line, err := num("coherency_line_size", 0)
		if err != nil {
			return err
		}
		sets, err := num("number_of_sets", 0)
		if err != nil {
			return err
		}
		perTag, err := num("physical_line_partition", 1)
		if err != nil {
			return err
		}
		id := unknownIndex
		if v, err := r.int(dir + "id"); err == nil && v >= 0 && v < 1<<31 {
			id = int(v)
		}
		assoc := 0 // unknown, as hwloc makes it when it cannot tell
		if line != 0 && perTag != 0 && sets > 1 {
			assoc = int(kB << 10 / line / perTag / sets)
		}
		o := &object{typ: typ, osIndex: id, cpus: set, cache: cacheAttr{
			size: kB << 10, depth: int(level), linesize: int(line), associativity: assoc, kind: kind,
		}}
		if err := b.add(o); err != nil {
			return err
		}
	}
	return nil
}

// cacheType is hwloc's type of a cache of that level and kind
// (hwloc_cache_type_by_depth_type).
func cacheType(level, kind int) (objType, bool) {
	if kind == cacheInstruction {
		switch level {
		case 1:
			return objL1i, true
		case 2:
			return objL2i, true
		case 3:
			return objL3i, true
		}
		return 0, false
	}
	switch level {
	case 1:
		return objL1, true
	case 2:
		return objL2, true
	case 3:
		return objL3, true
	case 4:
		return objL4, true
	case 5:
		return objL5, true
	}
	return 0, false
}

// above reports whether a is an ancestor of b by their cpusets: a's holds
// b's, and if they are the same a's type comes first.
func above(a, b *object) bool {
	if !b.cpus.within(a.cpus) {
		return false
	}
	return !a.cpus.equal(b.cpus) || a.typ < b.typ
}

// insert puts o into the tree under root where its cpuset belongs, as
// hwloc's insertion by cpuset does: below the deepest object above it,
// adopting the children it is above. An object of another's type and
// cpuset is that object, and a group with another object's cpuset gives
// way to it (but a memory group goes above a PU of its cpuset): o is then
// left out (its parent stays nil). A cpuset that overlaps another's
// without one holding the other is an error.
func insert(root, o *object) error {
	cur := root
	for {
		var into *object
		for i, c := range cur.children {
			if c.cpus.equal(o.cpus) {
				switch {
				case c.typ == o.typ:
					return nil
				case o.typ == objGroup && !(o.kind == groupKindMemory && c.typ == objPU):
					return nil
				case c.typ == objGroup && c.kind != groupKindMemory:
					// o takes the group's place, and its children
					o.parent, o.children, o.memChild = cur, c.children, c.memChild
					for _, g := range o.children {
						g.parent = o
					}
					for _, m := range o.memChild {
						m.parent = o
					}
					cur.children[i] = o
					return nil
				}
			}
			if above(c, o) {
				into = c
				break
			}
		}
		if into == nil {
			break
		}
		cur = into
	}
	if o.typ == objGroup && cur.cpus.equal(o.cpus) {
		return nil // a group with its parent's cpuset
	}
	var keep, adopt []*object
	for _, c := range cur.children {
		switch {
		case above(o, c):
			adopt = append(adopt, c)
		case c.cpus.intersects(o.cpus):
			return fmt.Errorf("%s %s and %s %s overlap without one holding the other", c.typ, c.cpus, o.typ, o.cpus)
		default:
			keep = append(keep, c)
		}
	}
	for _, c := range adopt {
		c.parent = o
	}
	o.children = append(o.children, adopt...)
	o.parent = cur
	cur.children = append(keep, o)
	return nil
}

// readNodes finds the NUMA nodes, their memory and distances, and
// attaches them.
func (t *topology) readNodes(r sysReader, b *builder, pageSize uint64) error {
	if !r.exists(nodeDir) {
		// No NUMA in the kernel: one node of all the memory.
		n := &object{typ: objNUMA, osIndex: 0, cpus: t.root.cpus.clone()}
		n.nodes.set(0)
		mem, err := meminfo(r, "proc/meminfo")
		if err != nil {
			return err
		}
		if n.pages, err = pages(r, "sys/kernel/mm/hugepages", mem, pageSize); err != nil {
			return err
		}
		n.memory = mem
		t.numa = []*object{n}
		return t.attach(n)
	}
	var ids []int
	if online, err := r.list(nodeDir + "/online"); err == nil {
		ids = online.members()
	} else if errors.Is(err, fs.ErrNotExist) {
		if ids, err = r.numbered(nodeDir, "node"); err != nil {
			return err
		}
	} else {
		return err
	}
	if len(ids) == 0 {
		return errors.New("no NUMA node in " + nodeDir)
	}
	var taken cpuset
	for _, id := range ids {
		dir := fmt.Sprintf("%s/node%d", nodeDir, id)
		m, err := r.mask(dir + "/cpumap")
		if err != nil {
			return fmt.Errorf("NUMA node %d: %w", id, err)
		}
		m = m.and(t.root.cpus)
		if m.intersects(taken) {
			return fmt.Errorf("NUMA node %d shares CPUs with another node", id)
		}
		taken = taken.or(m)
		n := &object{typ: objNUMA, osIndex: id, cpus: m}
		n.nodes.set(id)
		mem, err := meminfo(r, dir+"/meminfo")
		if err != nil {
			return fmt.Errorf("NUMA node %d: %w", id, err)
		}
		if n.pages, err = pages(r, dir+"/hugepages", mem, pageSize); err != nil {
			return fmt.Errorf("NUMA node %d: %w", id, err)
		}
		n.memory = mem
		t.numa = append(t.numa, n)
	}
	for _, n := range t.numa {
		if err := t.attach(n); err != nil {
			return err
		}
	}
	if len(t.numa) >= 2 {
		t.distances = distances(r, ids)
	}
	return nil
}

// meminfo reads MemTotal (in kB) of a meminfo file, in bytes; a file
// without it is no memory.
func meminfo(r sysReader, name string) (uint64, error) {
	s, err := r.read(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(s, "MemTotal: ")
	if !ok {
		return 0, nil
	}
	kB, err := leadingInt(rest, name)
	if err != nil || kB < 0 || kB > 1<<50 {
		return 0, fmt.Errorf("%s: MemTotal %q", name, short(rest))
	}
	return uint64(kB) << 10, nil
}

// pages is the memory by page size: huge pages as dir (hugepages-SIZEkB
// with nr_hugepages) has them, the rest normal pages, as hwloc counts.
func pages(r sysReader, dir string, mem, pageSize uint64) ([]pageType, error) {
	remaining := mem
	var huge []pageType
	if r.exists(dir) {
		ents, err := fs.ReadDir(r.fsys, dir)
		if err != nil {
			return nil, err
		}
		if len(ents) > 64 {
			return nil, fmt.Errorf("%s: %d entries", dir, len(ents))
		}
		for _, e := range ents {
			sz, ok := strings.CutPrefix(e.Name(), "hugepages-")
			if !ok {
				continue
			}
			kB, err := leadingInt(sz, dir+"/"+e.Name())
			if err != nil || kB <= 0 || kB > 1<<40 {
				return nil, fmt.Errorf("%s/%s: not a page size", dir, e.Name())
			}
			n, err := r.int(dir + "/" + e.Name() + "/nr_hugepages")
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil || n < 0 || n > 1<<50 {
				return nil, fmt.Errorf("%s/%s/nr_hugepages: %d %v", dir, e.Name(), n, err)
			}
			p := pageType{size: uint64(kB) << 10, count: uint64(n)}
			if p.count > remaining/p.size {
				remaining = 0
			} else {
				remaining -= p.count * p.size
			}
			huge = append(huge, p)
		}
	}
	sort.Slice(huge, func(i, j int) bool { return huge[i].size < huge[j].size })
	return append([]pageType{{size: pageSize, count: remaining / pageSize}}, huge...), nil
}

// attach hangs NUMA node n on the tree as hwloc does: a node without
// CPUs on a memory group of its own, of no CPUs, below the root; others
// on the highest object of exactly their cpuset below the root (a PU's
// core if that is the PU, when it has that cpuset), or on a new memory
// group of their cpuset.
func (t *topology) attach(n *object) error {
	var parent *object
	if n.cpus.empty() {
		parent = &object{typ: objGroup, osIndex: unknownIndex, kind: groupKindMemory, parent: t.root}
		t.root.children = append(t.root.children, parent)
	} else {
		cur := t.root
		for {
			var next *object
			for _, c := range cur.children {
				if n.cpus.within(c.cpus) {
					next = c
					break
				}
			}
			if next == nil {
				break
			}
			cur = next
			if cur.cpus.equal(n.cpus) {
				break
			}
		}
		if cur.typ == objPU {
			cur = cur.parent
		}
		switch {
		case cur != t.root && cur.cpus.equal(n.cpus):
			parent = cur
		case t.root.cpus.equal(n.cpus):
			parent = t.root
		default:
			g := &object{typ: objGroup, osIndex: unknownIndex, cpus: n.cpus.clone(), kind: groupKindMemory}
			if err := insert(t.root, g); err != nil {
				return fmt.Errorf("NUMA node %d: %w", n.osIndex, err)
			}
			if g.parent == nil {
				return fmt.Errorf("NUMA node %d: no place for its memory group", n.osIndex)
			}
			parent = g
		}
	}
	n.parent = parent
	parent.memChild = append(parent.memChild, n)
	return nil
}

// distances reads the NUMA distance matrix (each node's distance file
// lists its distance to every online node, in order), or nil if a row is
// missing or malformed, as hwloc then leaves distances out.
func distances(r sysReader, ids []int) []uint64 {
	n := len(ids)
	if n > 1024 {
		return nil
	}
	d := make([]uint64, 0, n*n)
	for _, id := range ids {
		s, err := r.read(fmt.Sprintf("%s/node%d/distance", nodeDir, id))
		if err != nil {
			return nil
		}
		f := strings.Fields(s)
		if len(f) != n {
			return nil
		}
		for _, x := range f {
			v, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return nil
			}
			d = append(d, v)
		}
	}
	return d
}

// allowedSets are the CPUs and NUMA nodes the process's cpuset cgroup
// allows, within cpus and nodes; all of them when it sets no limit or
// cannot be read (as hwloc takes it).
func allowedSets(r sysReader, cpus, nodes cpuset) (cpuset, cpuset) {
	kind, mnt := cgroupMount(r)
	name, ok := cgroupName(r)
	if kind == "" || !ok {
		return cpus.clone(), nodes.clone()
	}
	file := func(attr string) string {
		switch kind {
		case "cgroup2":
			return mnt + name + "/cpuset." + attr + ".effective"
		case "cgroup":
			return mnt + name + "/cpuset." + attr
		}
		return mnt + name + "/" + attr
	}
	read := func(attr string, all cpuset) cpuset {
		s, err := r.list(strings.TrimPrefix(path.Clean("/"+file(attr)), "/"))
		if err != nil {
			return all.clone()
		}
		return s.and(all)
	}
	return read("cpus", cpus), read("mems", nodes)
}

// cgroupMount finds where the cpuset controller is mounted, as hwloc
// looks for it: its usual places first, then proc/mounts. The kind is
// "cgroup2", "cgroup" (v1) or "cpuset" (the old cpuset file system).
func cgroupMount(r sysReader) (kind, mnt string) {
	switch {
	case r.exists("sys/fs/cgroup/cpuset.cpus.effective"):
		return "cgroup2", "/sys/fs/cgroup"
	case r.exists("sys/fs/cgroup/cpuset/cpuset.cpus"):
		return "cgroup", "/sys/fs/cgroup/cpuset"
	case r.exists("dev/cpuset/cpus"):
		return "cpuset", "/dev/cpuset"
	}
	mounts, err := r.read("proc/mounts")
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		dir, typ, opts := unescapeMount(f[1]), f[2], strings.Split(f[3], ",")
		switch typ {
		case "cgroup2":
			ctrls, err := r.read(strings.TrimPrefix(path.Clean(dir+"/cgroup.controllers"), "/"))
			if err == nil && slices.Contains(strings.Fields(ctrls), "cpuset") {
				return "cgroup2", dir
			}
		case "cpuset":
			return "cpuset", dir
		case "cgroup":
			if slices.Contains(opts, "cpuset") {
				if slices.Contains(opts, "noprefix") {
					return "cpuset", dir
				}
				return "cgroup", dir
			}
		}
	}
	return "", ""
}

// unescapeMount undoes proc/mounts's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupName is the process's cpuset cgroup: proc/self/cpuset, or the
// cpuset (v1) or unified (v2) line of proc/self/cgroup.
func cgroupName(r sysReader) (string, bool) {
	if s, err := r.read("proc/self/cpuset"); err == nil && strings.TrimSpace(s) != "" {
		return strings.TrimSpace(s), true
	}
	s, err := r.read("proc/self/cgroup")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(s, "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if p, ok := strings.CutPrefix(rest, "cpuset:"); ok {
			return p, true
		}
		if p, ok := strings.CutPrefix(rest, ":"); ok {
			return p, true
		}
	}
	return "", false
}
