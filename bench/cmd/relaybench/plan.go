package main

import (
	"fmt"
	"regexp"
	"strconv"
)

// planSummary is what the report shows of one EXPLAIN (ANALYZE, BUFFERS) text plan.
type planSummary struct {
	root        string   // the top node, e.g. "Sort"
	scans       []string // distinct scan nodes, e.g. "Index Scan using events_pending on events"
	rows        int64    // rows the top node returned
	removed     int64    // "Rows Removed by Filter" × loops, summed over nodes: rows walked past
	sharedHit   int64    // the top node's buffers
	sharedRead  int64
	execMS, jit float64 // execution time; JIT total (0: no JIT)
}

var (
	reNode    = regexp.MustCompile(`^\s*(?:->\s+)?([A-Z][^(]*?)\s+\(cost=[^)]*\)\s+\(actual time=[\d.]+\.\.[\d.]+ rows=(\d+) loops=(\d+)\)`)
	reNever   = regexp.MustCompile(`^\s*(?:->\s+)?([A-Z][^(]*?)\s+\(cost=[^)]*\)\s+\(never executed\)`)
	reScan    = regexp.MustCompile(`^(?:Parallel )?(?:Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Bitmap Index Scan)\b`)
	reOn      = regexp.MustCompile(`^(.*? on \S+)`)
	reRemoved = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)
	reBuffers = regexp.MustCompile(`Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?`)
	reExec    = regexp.MustCompile(`Execution Time: ([\d.]+) ms`)
	reJIT     = regexp.MustCompile(`Timing: .*Total ([\d.]+) ms`)
)

// summarizePlan reads a text plan (one line per element of lines).
func summarizePlan(lines []string) planSummary {
	var s planSummary
	seen := map[string]bool{}
	first, buffers := true, false
	var loops int64 // of the node being read
	for _, line := range lines {
		name := ""
		if m := reNode.FindStringSubmatch(line); m != nil {
			name = m[1]
			loops, _ = strconv.ParseInt(m[3], 10, 64)
			if first {
				s.root = name
				s.rows, _ = strconv.ParseInt(m[2], 10, 64)
			}
			first = false
		} else if m := reNever.FindStringSubmatch(line); m != nil {
			name, loops = m[1], 0
		}
		if reScan.MatchString(name) {
			if m := reOn.FindStringSubmatch(name); m != nil {
				name = m[1] // "… on events e": drop the alias
			}
			if !seen[name] {
				seen[name] = true
				s.scans = append(s.scans, name)
			}
		}
		if m := reRemoved.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			s.removed += n * loops
		}
		if m := reBuffers.FindStringSubmatch(line); m != nil && !buffers {
			buffers = true
			s.sharedHit, _ = strconv.ParseInt(m[1], 10, 64)
			s.sharedRead, _ = strconv.ParseInt(m[2], 10, 64)
		}
		if m := reExec.FindStringSubmatch(line); m != nil {
			s.execMS, _ = strconv.ParseFloat(m[1], 64)
		}
		if m := reJIT.FindStringSubmatch(line); m != nil {
			s.jit, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	return s
}

func (s planSummary) jitText() string {
	if s.jit == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", s.jit)
}
