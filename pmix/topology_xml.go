package pmix

import (
	"slices"
	"strconv"
	"strings"
)

// number sorts every object's children by their first CPU (as hwloc
// wants them, else it complains and reorders; see firstKey), gives every object its
// gp_index and computes the nodesets as hwloc's core does
// (propagate_nodeset): an object's nodes are those attached to it or to
// an object above it, and those of the objects below it.
func (t *topology) number() {
	gp := 0
	var walk func(o *object, inherited cpuset)
	walk = func(o *object, inherited cpuset) {
		gp++
		o.gpIndex = gp
		slices.SortStableFunc(o.children, func(a, b *object) int { return firstKey(a) - firstKey(b) })
		slices.SortStableFunc(o.memChild, func(a, b *object) int { return a.osIndex - b.osIndex })
		o.nodes = inherited.clone()
		for _, m := range o.memChild {
			gp++
			m.gpIndex = gp
			o.nodes = o.nodes.or(m.nodes)
		}
		own := o.nodes
		for _, c := range o.children {
			walk(c, own)
		}
		for _, c := range o.children {
			o.nodes = o.nodes.or(c.nodes)
		}
	}
	walk(t.root, nil)
}

// firstKey orders children as hwloc does, by their first CPU, those
// without CPUs last.
func firstKey(o *object) int {
	if f := o.cpus.first(); f >= 0 {
		return f
	}
	return maxCPUs
}

// xml is the topology as hwloc 2 writes it (hwloc_topology_export_xml
// without flags), in the form both of hwloc's XML readers take (its own
// minimal one wants the header lines and the <topology> tag as here, and
// attribute values in double quotes): no info attributes, no CPU kinds,
// no support flags.
func (t *topology) xml() string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<!DOCTYPE topology SYSTEM "hwloc2.dtd">` + "\n")
	b.WriteString(`<topology version="2.0">` + "\n")
	t.writeObject(&b, t.root, 2)
	if len(t.distances) > 0 {
		n := len(t.numa)
		b.WriteString(`  <distances2 type="NUMANode" nbobjs="` + strconv.Itoa(n) + `" kind="5" name="NUMALatency" indexing="os">` + "\n")
		idx := make([]uint64, n)
		for i, node := range t.numa {
			idx[i] = uint64(node.osIndex)
		}
		writeArray(&b, "indexes", idx)
		writeArray(&b, "u64values", t.distances)
		b.WriteString("  </distances2>\n")
	}
	b.WriteString("</topology>\n")
	return b.String()
}

// writeArray writes values as hwloc does: tags of ten values each, a
// space after each value, the content's length given (hwloc checks it).
func writeArray(b *strings.Builder, tag string, values []uint64) {
	for i := 0; i < len(values); i += 10 {
		var c strings.Builder
		for _, v := range values[i:min(i+10, len(values))] {
			c.WriteString(strconv.FormatUint(v, 10))
			c.WriteByte(' ')
		}
		b.WriteString("    <" + tag + ` length="` + strconv.Itoa(c.Len()) + `">` + c.String() + "</" + tag + ">\n")
	}
}

func (t *topology) writeObject(b *strings.Builder, o *object, indent int) {
	pad := strings.Repeat(" ", indent)
	attr := func(name, value string) {
		b.WriteString(" " + name + `="` + value + `"`)
	}
	b.WriteString(pad + "<object")
	attr("type", o.typ.String())
	if o.osIndex != unknownIndex {
		attr("os_index", strconv.Itoa(o.osIndex))
	}
	complete := o.cpus
	if o == t.root {
		complete = o.cpus.or(t.completeCPUs)
	}
	attr("cpuset", o.cpus.String())
	attr("complete_cpuset", complete.String())
	if o == t.root {
		attr("allowed_cpuset", t.allowedCPUs.String())
	}
	attr("nodeset", o.nodes.String())
	attr("complete_nodeset", o.nodes.String())
	if o == t.root {
		attr("allowed_nodeset", t.allowedNodes.String())
	}
	attr("gp_index", strconv.Itoa(o.gpIndex))
	switch {
	case o.typ == objGroup:
		if o.subtype != "" {
			attr("subtype", o.subtype)
		}
		attr("kind", strconv.Itoa(o.kind))
		attr("subkind", "0")
	case o.typ.isCache():
		attr("cache_size", strconv.FormatUint(o.cache.size, 10))
		attr("depth", strconv.Itoa(o.cache.depth))
		attr("cache_linesize", strconv.Itoa(o.cache.linesize))
		attr("cache_associativity", strconv.Itoa(o.cache.associativity))
		attr("cache_type", strconv.Itoa(o.cache.kind))
	case o.typ == objNUMA:
		if o.memory != 0 {
			attr("local_memory", strconv.FormatUint(o.memory, 10))
		}
	}
	if len(o.pages) == 0 && len(o.memChild) == 0 && len(o.children) == 0 {
		b.WriteString("/>\n")
		return
	}
	b.WriteString(">\n")
	for _, p := range o.pages {
		b.WriteString(pad + `  <page_type size="` + strconv.FormatUint(p.size, 10) + `" count="` + strconv.FormatUint(p.count, 10) + `"/>` + "\n")
	}
	for _, m := range o.memChild {
		t.writeObject(b, m, indent+2)
	}
	for _, c := range o.children {
		t.writeObject(b, c, indent+2)
	}
	b.WriteString(pad + "</object>\n")
}
