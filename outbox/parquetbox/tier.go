package parquetbox

import (
	"path"
	"sort"
	"strconv"
	"strings"
)

// fanOut is how many runs of one tier a merge takes (T in ADR 0011): a
// run of weight w is in tier ⌊log_fanOut w⌋.
const fanOut = 4

// run is one sorted run of a unit: a file a log conversion wrote (weight
// 1), or the files one merge wrote, whose weight is the number of log
// conversions folded into them.
type run struct {
	key    string
	weight int
	files  []*openFile
	// foreign is set when a file is not this package's sorted output
	// (another writer's), which a compaction always rewrites.
	foreign bool
}

// compacted reports whether a run is a merge's output.
func (r run) compacted() bool {
	for _, f := range r.files {
		if !isCompacted(f) {
			return false
		}
	}
	return true
}

// parseRun returns the run a file belongs to and the run's weight. A
// merge's files are named <bucket>-compacted-<micros>-<random>-w<weight>-<seq>.parquet;
// any other file is a run of its own of weight 1.
func parseRun(name string) (key string, weight int) {
	base := path.Base(name)
	_, _, rest, _ := splitBucket(base)
	stem, ok := strings.CutSuffix(rest, ".parquet")
	if !ok || !strings.HasPrefix(stem, "compacted-") {
		return name, 1
	}
	i := strings.LastIndexByte(stem, '-')
	if i < 0 {
		return name, 1
	}
	head := stem[:i]
	j := strings.LastIndex(head, "-w")
	if j < 0 {
		return name, 1
	}
	w, err := strconv.Atoi(head[j+2:])
	if err != nil || w < 1 {
		return name, 1
	}
	return path.Dir(name) + "/" + strings.TrimSuffix(base, stem[i:]+".parquet"), w
}

// groupRuns groups a unit's files into runs, in the order of their keys.
func groupRuns(files []*openFile) []run {
	byKey := map[string]*run{}
	var keys []string
	for _, f := range files {
		k, w := parseRun(f.name)
		r, ok := byKey[k]
		if !ok {
			r = &run{key: k, weight: w}
			byKey[k] = r
			keys = append(keys, k)
		}
		r.files = append(r.files, f)
		r.foreign = r.foreign || !f.Ours()
	}
	sort.Strings(keys)
	out := make([]run, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
	}
	return out
}

// totalWeight sums the runs' weights: how many log conversions the unit
// holds.
func totalWeight(runs []run) int {
	w := 0
	for _, r := range runs {
		w += r.weight
	}
	return w
}

// tierOf returns the tier of a run of weight w: ⌊log_fanOut w⌋.
func tierOf(w int) int {
	t := 0
	for x := fanOut; w >= x; x *= fanOut {
		t++
	}
	return t
}

// runBound is the most runs a unit holding w log conversions keeps after
// its last compaction of the day: ⌈log_fanOut w⌉ + 1.
func runBound(w int) int {
	b := 1
	for x := 1; x < w; x *= fanOut {
		b++
	}
	return b
}

// planMerges returns the merges the tiers call for, each a set of runs
// to fold into one: while a tier holds fanOut runs or more, they become
// one run of a higher tier, which may fill that tier in turn (cascading
// merges are planned as one, so a row is written once per compaction).
// A run another writer wrote is always rewritten, alone if need be.
func planMerges(runs []run) [][]run {
	type group struct {
		weight int
		runs   []run
	}
	groups := make([]*group, len(runs))
	for i, r := range runs {
		groups[i] = &group{weight: r.weight, runs: []run{r}}
	}
	for {
		byTier := map[int][]int{}
		lowest := -1
		for i, g := range groups {
			t := tierOf(g.weight)
			byTier[t] = append(byTier[t], i)
			if len(byTier[t]) >= fanOut && (lowest < 0 || t < lowest) {
				lowest = t
			}
		}
		if lowest < 0 {
			break
		}
		merged := &group{}
		take := map[int]bool{}
		for _, i := range byTier[lowest] {
			take[i] = true
			merged.weight += groups[i].weight
			merged.runs = append(merged.runs, groups[i].runs...)
		}
		kept := groups[:0:0]
		for i, g := range groups {
			if !take[i] {
				kept = append(kept, g)
			}
		}
		groups = append(kept, merged)
	}
	var out [][]run
	for _, g := range groups {
		if len(g.runs) > 1 || g.runs[0].foreign {
			out = append(out, g.runs)
		}
	}
	return out
}
