package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/kubevmm/kubevmm/vmm/machine"
)

// writeProfile writes samples as "count share rip symbol+offset", hottest
// first, then the same aggregated per symbol.
func writeProfile(path string, samples []machine.Sample, systemMap string) error {
	syms := loadSymbols(systemMap)
	total := 0
	for _, s := range samples {
		total += s.Count
	}
	bySym := map[string]int{}
	var b strings.Builder
	fmt.Fprintf(&b, "# %d samples\n", total)
	for _, s := range samples {
		name := syms.lookup(s.RIP)
		bySym[strings.SplitN(name, "+", 2)[0]] += s.Count
		fmt.Fprintf(&b, "%6d %5.1f%% %#x %s\n", s.Count, 100*float64(s.Count)/float64(max(total, 1)), s.RIP, name)
	}
	type kv struct {
		k string
		v int
	}
	var agg []kv
	for k, v := range bySym {
		agg = append(agg, kv{k, v})
	}
	sort.Slice(agg, func(i, j int) bool { return agg[i].v > agg[j].v })
	b.WriteString("# by symbol\n")
	for _, a := range agg {
		fmt.Fprintf(&b, "%6d %5.1f%% %s\n", a.v, 100*float64(a.v)/float64(max(total, 1)), a.k)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

type symbols []struct {
	addr uint64
	name string
}

func loadSymbols(path string) symbols {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // read-only
	var s symbols
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || !strings.ContainsAny(fields[1], "tTwW") {
			continue
		}
		a, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			continue
		}
		s = append(s, struct {
			addr uint64
			name string
		}{a, fields[2]})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].addr < s[j].addr })
	return s
}

func (s symbols) lookup(rip uint64) string {
	i := sort.Search(len(s), func(i int) bool { return s[i].addr > rip }) - 1
	if i < 0 {
		return "?"
	}
	return fmt.Sprintf("%s+%#x", s[i].name, rip-s[i].addr)
}
