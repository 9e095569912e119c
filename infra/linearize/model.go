package main

import (
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// sold is a capacity partition's state: the tickets of the tier taken.
type sold int

// ticket is a check-in partition's state.
type ticket int

const (
	fresh ticket = iota
	admitted
	cancelled
)

func (t ticket) String() string { return [...]string{"fresh", "admitted", "cancelled"}[t] }

// step is both models at once: a partition holds operations of one model
// only, and its state starts as nil (Init), typed by its first step.
func step(state, in, out interface{}) (bool, interface{}) {
	i, o := in.(input), out.(output).Status
	switch i.Op {
	case "reserve", "hold": // a hold is an "ok" reserve: what an order cut off mid-way took
		s, _ := state.(sold)
		fits := int(s)+i.K <= i.Capacity
		switch o {
		case "ok": // taken only if it fits: never oversold
			return fits, s + sold(i.K)
		case "sold_out": // refused only if it does not fit: sold-out answers are justified
			return !fits, s
		default: // unknown: took effect if it fitted (or, linearized last, never)
			if fits {
				return true, s + sold(i.K)
			}
			return true, s
		}
	case "release": // a hold given back by the outbox sweep
		s, _ := state.(sold)
		return int(s) >= i.K, s - sold(i.K)
	case "checkin":
		t, _ := state.(ticket)
		switch o {
		case "admitted": // the first scan admits
			return t == fresh, admitted
		case "already": // every later one says already
			return t == admitted, t
		case "cancelled":
			return t == cancelled, t
		default: // unknown
			if t == fresh {
				return true, admitted
			}
			return true, t
		}
	case "cancel":
		t, _ := state.(ticket)
		switch o {
		case "ok": // a ticket not admitted can be cancelled (again)
			return t != admitted, cancelled
		case "refused": // an admitted one cannot
			return t == admitted, t
		default:
			if t == fresh {
				return true, cancelled
			}
			return true, t
		}
	}
	return false, state
}

var model = porcupine.Model{
	Init: func() interface{} { return nil },
	Step: step,
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output).Status
		if i.Op == "reserve" || i.Op == "hold" || i.Op == "release" {
			return fmt.Sprintf("%s(%d of %d) -> %s", i.Op, i.K, i.Capacity, o)
		}
		return fmt.Sprintf("%s -> %s", i.Op, o)
	},
	DescribeState: func(state interface{}) string {
		switch s := state.(type) {
		case sold:
			return fmt.Sprintf("sold %d", int(s))
		case ticket:
			return s.String()
		}
		return "initial"
	},
}

type verdict struct {
	illegal []*partition
	unknown []*partition
	why     map[*partition]string // a reason found without the search, by partition
}

// oversold names the tickets a capacity partition's "ok" answers take (less
// what its releases give back) when they take more than its capacity. Every
// linearization applies every "ok" and every release, so such a history is
// illegal whatever the order:
// said at once, where porcupine's search would have to try every order of
// the overlapping operations first (2^n of n racing orders) to say the same.
func oversold(p *partition) (string, bool) {
	if p.model != modelCapacity {
		return "", false
	}
	taken, capacity := 0, 0
	for _, op := range p.ops {
		i := op.Input.(input)
		capacity = max(capacity, i.Capacity)
		switch {
		case i.Op == "release": // a hold given back: its tickets are sold again
			taken -= i.K
		case op.Output.(output).Status == "ok":
			taken += i.K
		}
	}
	if taken <= capacity {
		return "", false
	}
	return fmt.Sprintf("its ok answers alone take %d of %d", taken, capacity), true
}

func check(h *history, timeout time.Duration) verdict {
	v := verdict{why: map[*partition]string{}}
	for _, p := range h.partitions {
		if why, bad := oversold(p); bad {
			v.illegal = append(v.illegal, p)
			v.why[p] = why
			continue
		}
		switch porcupine.CheckOperationsTimeout(model, p.ops, timeout) {
		case porcupine.Illegal:
			v.illegal = append(v.illegal, p)
		case porcupine.Unknown:
			v.unknown = append(v.unknown, p)
		}
	}
	return v
}

// visualize writes porcupine's HTML page of the whole history, one row group per partition.
func visualize(h *history, path string) error {
	var all []porcupine.Operation
	index := map[int]int{} // operation's position in all -> its partition
	for pi, p := range h.partitions {
		for _, op := range p.ops {
			index[len(all)] = pi
			all = append(all, op)
		}
	}
	m := model
	m.Partition = func(ops []porcupine.Operation) [][]porcupine.Operation {
		out := make([][]porcupine.Operation, len(h.partitions))
		for i, op := range ops {
			out[index[i]] = append(out[index[i]], op)
		}
		return out
	}
	_, info := porcupine.CheckOperationsVerbose(m, all, time.Minute)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(m, info, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
