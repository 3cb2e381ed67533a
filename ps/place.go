package ps

import "fmt"

// Partition is one piece of a key, placed on one hub.
type Partition struct {
	Key      string
	Off, Len int // in elements
	Hub      int
}

// Placement puts keys on hubs: each key, in the order it is added, is cut
// into partitions of at most PartElems elements, and each partition goes
// to the hub with the fewest elements so far (ties to the lowest hub
// number). It is a pure function of the keys added and their order, so
// every worker that declares the same keys in the same order computes the
// same placement. The client places its keys and every collective round
// with it, and the bench's cost model predicts hub traffic with it.
type Placement struct {
	partElems int
	load      []int
}

// NewPlacement starts an empty placement on hubs hubs.
func NewPlacement(hubs, partElems int) (*Placement, error) {
	if partElems < 1 || hubs < 1 {
		return nil, fmt.Errorf("ps: partition size %d and hub count %d must be positive", partElems, hubs)
	}
	return &Placement{partElems: partElems, load: make([]int, hubs)}, nil
}

// Add places a key of n elements (n >= 0; an empty key still gets one
// empty partition, so that it exists on a hub) and returns its partitions.
func (p *Placement) Add(key string, n int) []Partition {
	var parts []Partition
	for off := 0; off < n || off == 0; off += p.partElems {
		part := Partition{Key: key, Off: off, Len: max(0, min(p.partElems, n-off))}
		for h := range p.load {
			if p.load[h] < p.load[part.Hub] {
				part.Hub = h
			}
		}
		p.load[part.Hub] += part.Len
		parts = append(parts, part)
		if n <= 0 {
			break
		}
	}
	return parts
}

// Loads is the number of elements placed on each hub so far.
func (p *Placement) Loads() []int { return append([]int(nil), p.load...) }
