package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
)

// sectionTitle is the level-2 heading of this program's section of the results file.
const sectionTitle = "Writer"

// busyNote ends the preamble's warning about a high load average. The load at the end
// counts the run's own clients and backends (32 clients lift it well above 2); only the
// load at the start says whether other work shared the machine.
const busyNote = `the run's own clients and server backends count in it (the load at the end follows ` +
	`the last configuration's clients); a load above nproc at the start means other work shared ` +
	`the machine and biased some runs (see "Every run").`

// Targets from the issue, and the minimal-table costs seen before on this machine.
const (
	targetOutboxVsMinimalPoints = 5.0 // outbox cost at most this many points above the minimal table's…
	targetClients               = 8   // …at this many clients
	targetBatchSpeedup          = 10.0
)

var referenceMinimalCost = map[int]float64{1: 12, 8: 18, 32: 26}

// report holds everything one run measured.
type report struct {
	started time.Time
	opts    options
	machine benchreport.Machine
	tps     [][][]float64   // [client count index][mode] per-run tx/s
	batch   [][]batchResult // [0: batch, 1: single] per run
	// 1, 5 and 15 minute load averages when the measurements started and ended:
	// other work on the machine biases the figures
	loadStart, loadEnd string
}

// cost is the throughput lost against base, in percent.
func cost(base, x float64) float64 { return (base - x) / base * 100 }

// markdown renders the "Writer" section.
func (r report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("## %s\n\n", sectionTitle)
	p("What `outbox.Enqueue` costs a writer's throughput. Written by `bench/cmd/writerbench`; rerun to replace this section.\n\n")
	b.WriteString(benchreport.Preamble("./cmd/writerbench", r.started, r.machine, r.loadStart, r.loadEnd,
		busyNote))
	p("- Go: %s %s/%s; %d interleaved runs of %s per configuration, medians reported\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, r.opts.runs, r.opts.duration)

	p("### Throughput\n\n")
	p("Each transaction: `UPDATE accounts SET balance = balance + 1 WHERE id = $1` (random id of %d) then commit, through a pgxpool; ", benchdb.Accounts)
	p("\"+ minimal insert\" adds one INSERT into a 5-column table (bigserial primary key, no other index); ")
	p("\"+ raw events insert\" adds one hand-written `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload) VALUES (…)`: the real table with its indexes and constraint, without Enqueue's validation, aggregate lock and statement (the floor of the schema); ")
	p("\"+ outbox.Enqueue\" adds one `outbox.Enqueue` of one event (aggregate account/id, %d-byte JSON payload) via `outbox.PgxTx(tx)`. ", len(benchdb.Payload))
	p("Cost = (business only − x) / business only. Before every measurement both event tables are truncated, `accounts` vacuumed and a checkpoint taken.\n\n")
	p("| clients | business only (tx/s) | + minimal insert (tx/s) | minimal cost | + raw events insert (tx/s) | raw cost | + outbox.Enqueue (tx/s) | outbox cost | outbox − minimal | outbox − raw |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	costs := make(map[int][3]float64) // minimal, outbox, raw
	for ci, clients := range clientCounts {
		base := benchreport.Median(r.tps[ci][modeBase])
		minimal := benchreport.Median(r.tps[ci][modeMinimal])
		raw := benchreport.Median(r.tps[ci][modeRaw])
		ob := benchreport.Median(r.tps[ci][modeOutbox])
		cm, cr, co := cost(base, minimal), cost(base, raw), cost(base, ob)
		costs[clients] = [3]float64{cm, co, cr}
		p("| %d | %.0f | %.0f | %.1f%% | %.0f | %.1f%% | %.0f | %.1f%% | %+.1f pts | %+.1f pts |\n", clients, base, minimal, cm, raw, cr, ob, co, co-cm, co-cr)
	}

	p("\n### Payload as written (json) vs jsonb\n\n")
	p("The same `outbox.Enqueue`, into the default schema (payload column json: kept as written, checked as JSON) and into a schema whose payload column was altered back to jsonb (parsed into its binary form, rendered again when read).\n\n")
	p("| clients | + outbox.Enqueue, json (tx/s) | + outbox.Enqueue, jsonb (tx/s) | json cost | jsonb cost | json − jsonb |\n|---:|---:|---:|---:|---:|---:|\n")
	for ci, clients := range clientCounts {
		base := benchreport.Median(r.tps[ci][modeBase])
		js, jb := benchreport.Median(r.tps[ci][modeOutbox]), benchreport.Median(r.tps[ci][modeOutboxJSONB])
		p("| %d | %.0f | %.0f | %.1f%% | %.1f%% | %+.1f pts |\n", clients, js, jb, cost(base, js), cost(base, jb), cost(base, js)-cost(base, jb))
	}

	batchEnq := make([]float64, 2)
	batchTx := make([]float64, 2)
	for i, runs := range r.batch {
		var enq, tx []float64
		for _, res := range runs {
			enq = append(enq, micros(res.enqueuePerEvent()))
			tx = append(tx, micros(res.txPerEvent()))
		}
		batchEnq[i], batchTx[i] = benchreport.Median(enq), benchreport.Median(tx)
	}
	ratioEnq, ratioTx := batchEnq[1]/batchEnq[0], batchTx[1]/batchTx[0]

	p("\n### Batch vs single Enqueue calls\n\n")
	p("One client, one transaction of %d events for %d distinct accounts: one `Enqueue` call with all of them (batch%d) or %d calls of one event (single%d). ",
		batchSize, batchSize, batchSize, batchSize, batchSize)
	p("\"In Enqueue\" is the time spent in the Enqueue calls; \"whole transaction\" adds begin and commit.\n\n")
	p("| mode | µs/event in Enqueue | µs/event, whole transaction |\n|---|---:|---:|\n")
	for i, single := range []bool{false, true} {
		p("| %s | %.2f | %.2f |\n", batchName(single), batchEnq[i], batchTx[i])
	}
	p("| single/batch ratio | %.1f× | %.1f× |\n", ratioEnq, ratioTx)

	c := costs[targetClients]
	diff := c[1] - c[0]
	p("\n### Targets (this run)\n\n")
	p("- Outbox within %.0f points of the minimal table at %d clients: %s — outbox %.1f%%, minimal %.1f%%, difference %+.1f points.\n",
		targetOutboxVsMinimalPoints, targetClients, benchreport.Met(diff <= targetOutboxVsMinimalPoints), c[1], c[0], diff)
	p("- For scale, not a target: the hand-written INSERT into the same table costs %.1f%% at %d clients, %+.1f points over the minimal table; Enqueue adds %+.1f points over it.\n",
		c[2], targetClients, c[2]-c[0], c[1]-c[2])
	p("- %d-event batch ≥ %.0f× faster per event than single calls: %s — %.1f× in Enqueue (%.1f× per whole transaction).\n",
		batchSize, targetBatchSpeedup, benchreport.Met(ratioEnq >= targetBatchSpeedup), ratioEnq, ratioTx)
	p("- Reference only: minimal-table cost seen before on this machine ")
	var ref, now []string
	for _, clients := range clientCounts {
		ref = append(ref, fmt.Sprintf("%.0f%%", referenceMinimalCost[clients]))
		now = append(now, fmt.Sprintf("%.1f%%", costs[clients][0]))
	}
	p("%s at %s clients; this run %s.\n", strings.Join(ref, "/"), joinInts(clientCounts, "/"), strings.Join(now, "/"))

	p("\n### Every run (tx/s)\n\n| clients | configuration | runs |\n|---:|---|---|\n")
	for ci, clients := range clientCounts {
		for _, m := range modes {
			var runs []string
			for _, x := range r.tps[ci][m] {
				runs = append(runs, fmt.Sprintf("%.0f", x))
			}
			p("| %d | %s | %s |\n", clients, m, strings.Join(runs, ", "))
		}
	}
	for i, single := range []bool{false, true} {
		var runs []string
		for _, res := range r.batch[i] {
			runs = append(runs, fmt.Sprintf("%.2f", micros(res.enqueuePerEvent())))
		}
		p("| 1 | %s, µs/event in Enqueue | %s |\n", batchName(single), strings.Join(runs, ", "))
	}
	return b.String()
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}
