package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

const (
	modelCapacity = "capacity"
	modelCheckin  = "checkin"
)

// The model each op belongs to.
var opModel = map[string]string{
	"reserve": modelCapacity, "hold": modelCapacity, "release": modelCapacity,
	"checkin": modelCheckin, "cancel": modelCheckin,
}

// The statuses each op may end with. "unknown": the client does not know
// whether it took effect (timeout, lost connection, a 503 after a write);
// "none": it certainly took no effect (refused before any write), so it
// constrains nothing and is left out.
var opStatuses = map[string][]string{
	"reserve": {"ok", "sold_out", "unknown", "none"},
	"hold":    {"ok"},
	"release": {"ok"},
	"checkin": {"admitted", "already", "cancelled", "unknown", "none"},
	"cancel":  {"ok", "refused", "unknown", "none"},
}

// line is one line of a history file: a header ({"header": {...}}) or an operation.
type line struct {
	Header *struct {
		Capacity map[string]int `json:"capacity"`
	} `json:"header"`
	Client *int           `json:"client"`
	Op     string         `json:"op"`
	Key    string         `json:"key"`
	Input  map[string]any `json:"input"`
	Output *struct {
		Status string `json:"status"`
	} `json:"output"`
	Call   *int64 `json:"call"`
	Return *int64 `json:"return"`
	// Anything else on the line (e.g. the HTTP answers) is only shown in the visualization.
}

// input is what the model steps on.
type input struct {
	Op       string
	K        int // reserve: tickets asked for
	Capacity int // reserve: the tier's capacity
}

type output struct {
	Status string
}

type partition struct {
	model string
	key   string
	ops   []porcupine.Operation
}

type history struct {
	partitions []*partition // sorted by model, then key
	checked    int          // operations given to the checker
	pending    int          // of which of unknown outcome
	dropped    int          // operations without effect, left out
}

func parse(r io.Reader, only string) (*history, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	capacity := map[string]int{}
	type raw struct {
		no int
		l  line
		tx string
	}
	var ops []raw
	for no := 1; sc.Scan(); no++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(text))
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("line %d: %v", no, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d: more than one JSON value", no)
		}
		if l.Header != nil {
			for k, c := range l.Header.Capacity {
				if old, ok := capacity[k]; ok && old != c {
					return nil, fmt.Errorf("line %d: capacity of %q given as %d and %d", no, k, old, c)
				}
				if c < 0 {
					return nil, fmt.Errorf("line %d: negative capacity of %q", no, k)
				}
				capacity[k] = c
			}
			continue
		}
		ops = append(ops, raw{no, l, string(text)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, errors.New("no operations")
	}

	var maxTime int64
	for _, o := range ops {
		if o.l.Call != nil && *o.l.Call > maxTime {
			maxTime = *o.l.Call
		}
		if o.l.Return != nil && *o.l.Return > maxTime {
			maxTime = *o.l.Return
		}
	}
	// Porcupine has no pending operations: an operation of unknown outcome
	// returns after everything else, so it may be linearized anywhere after
	// its call, including "never" (last, where nothing observes it).
	end := maxTime + 1

	byKey := map[string]*partition{}
	h := &history{}
	for _, o := range ops {
		l, no := o.l, o.no
		model, ok := opModel[l.Op]
		switch {
		case l.Op == "":
			return nil, fmt.Errorf("line %d: no op (and not a header)", no)
		case !ok:
			return nil, fmt.Errorf("line %d: unknown op %q (want reserve, hold, release, checkin or cancel)", no, l.Op)
		case only != "auto" && model != only:
			return nil, fmt.Errorf("line %d: op %q is not of the %s model", no, l.Op, only)
		case l.Client == nil || *l.Client < 0:
			return nil, fmt.Errorf("line %d: client must be an integer >= 0", no)
		case l.Key == "":
			return nil, fmt.Errorf("line %d: no key", no)
		case l.Call == nil:
			return nil, fmt.Errorf("line %d: no call time", no)
		case l.Output == nil:
			return nil, fmt.Errorf("line %d: no output", no)
		case !contains(opStatuses[l.Op], l.Output.Status):
			return nil, fmt.Errorf("line %d: %s status %q (want one of %s)", no, l.Op, l.Output.Status,
				strings.Join(opStatuses[l.Op], ", "))
		case l.Return != nil && *l.Return < *l.Call:
			return nil, fmt.Errorf("line %d: returns before its call", no)
		case l.Return == nil && l.Output.Status != "unknown" && l.Output.Status != "none":
			return nil, fmt.Errorf("line %d: status %q without a return time", no, l.Output.Status)
		}
		in := input{Op: l.Op}
		if model == modelCapacity {
			k, err := intField(l.Input, "k")
			if err != nil || k < 1 {
				return nil, fmt.Errorf("line %d: %s needs input.k, an integer >= 1", no, l.Op)
			}
			in.K = k
			c, has := capacity[l.Key]
			if _, given := l.Input["capacity"]; given {
				oc, err := intField(l.Input, "capacity")
				if err != nil || oc < 0 {
					return nil, fmt.Errorf("line %d: input.capacity must be an integer >= 0", no)
				}
				if has && oc != c {
					return nil, fmt.Errorf("line %d: capacity of %q given as %d and %d", no, l.Key, c, oc)
				}
				c, has = oc, true
				capacity[l.Key] = c
			}
			if !has {
				return nil, fmt.Errorf("line %d: no capacity for %q (header or input.capacity)", no, l.Key)
			}
			in.Capacity = c
		}
		if l.Output.Status == "none" {
			h.dropped++
			continue
		}
		ret := end
		if l.Output.Status == "unknown" {
			h.pending++
		} else {
			ret = *l.Return
		}
		pk := model + "\x00" + l.Key
		p := byKey[pk]
		if p == nil {
			p = &partition{model: model, key: l.Key}
			byKey[pk] = p
			h.partitions = append(h.partitions, p)
		}
		p.ops = append(p.ops, porcupine.Operation{
			ClientId: *l.Client, Input: in, Call: *l.Call, Output: output{l.Output.Status}, Return: ret,
			Metadata: fmt.Sprintf("line %d: %s", no, o.tx),
		})
		h.checked++
	}
	sort.Slice(h.partitions, func(i, j int) bool {
		a, b := h.partitions[i], h.partitions[j]
		return a.model < b.model || (a.model == b.model && a.key < b.key)
	})
	return h, nil
}

func intField(m map[string]any, name string) (int, error) {
	v, ok := m[name].(float64)
	if !ok || v != float64(int(v)) {
		return 0, fmt.Errorf("%s: not an integer", name)
	}
	return int(v), nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
