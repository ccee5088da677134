//go:build e2e

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

// The crash-consistency run (issue 27): kubewire is killed with SIGKILL at
// random moments, chosen by a seeded generator, and restarted on the same
// spool, while the cluster churns. Afterwards Kafka and JetStream must hold
// no order violation, no completed snapshot that would prune a live object,
// and, since every run resumes from the checkpoint (issue 26), every
// version written, or a gap event declaring it.
const (
	crashBuffer  = 200     // events in memory per sink: small, so the spool is used
	crashSpool   = 4 << 20 // spool.maxBytes per sink: the least allowed, to reach the bound
	crashObjects = 40      // ConfigMap names the churn cycles through
	// crashLatency is how long before the scrape a change may have been
	// written and still not be in the memory kubewire reported: the time
	// the watch takes to deliver it, generously on a loaded machine.
	crashLatency = time.Second
)

// crashMoment is when in kubewire's life a cycle kills it.
type crashMoment int

const (
	duringOutage crashMoment = iota
	restartIntoOutage
	whileDraining
	duringSnapshot
)

func (m crashMoment) String() string {
	return [...]string{"outage", "restart-into-outage", "draining", "snapshot"}[m]
}

var crashSinks = []string{"kafka", "js"}

// momentCounts says how many kills each moment had, for the fault table.
func momentCounts(moments []string) string {
	n := map[string]int{}
	for _, m := range moments {
		n[m]++
	}
	var out []string
	for m := duringOutage; m <= duringSnapshot; m++ {
		if n[m.String()] > 0 {
			out = append(out, fmt.Sprintf("%d %s", n[m.String()], m))
		}
	}
	return strings.Join(out, ", ")
}

// crashKill is what the test knew about kubewire at one SIGKILL.
type crashKill struct {
	cycle  int
	moment crashMoment
	delay  time.Duration // the drawn delay before the kill
	at     time.Time
	// scraped reports whether /metrics answered; a process killed before
	// it serves had not started its sinks, and held nothing.
	scraped bool
	// memory is kubewire_buffer_events per sink at the scrape: events
	// queued in memory and not acknowledged, which SIGKILL loses.
	memory, spooled map[string]float64
	// conflated is kubewire_events_conflated_total per sink at the scrape
	// (this run's folds), and full kubewire_spool_full.
	conflated, full map[string]float64
	// diskBytes is the size of each sink's spool directory at the kill.
	diskBytes map[string]int64
	// scrapeToKill is the time from the start of the scrape to the kill,
	// and arrivals the versions the churn wrote from crashLatency before
	// the scrape to the kill: changes memory may have taken in unreported.
	scrapeToKill time.Duration
	arrivals     int
}

func crashEnv(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestE2ECrashCyclesOfSIGKILLLoseNoVersionAndNeverPruneALiveObject(t *testing.T) {
	seed := crashEnv(t, "KUBEWIRE_CRASH_SEED", 1)
	cycles := int(crashEnv(t, "KUBEWIRE_CRASH_CYCLES", 5))
	t.Logf("crash cycles: KUBEWIRE_CRASH_SEED=%d KUBEWIRE_CRASH_CYCLES=%d", seed, cycles)
	rnd := rand.New(rand.NewPCG(seed, 27))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo)+1)) }

	ns := namespace(t)
	p := newProcs(t, ns)
	kb := kafkatest.Start(t, nil)
	nsrv := natstest.Start(t)
	spoolDir := filepath.Join(p.dir, "spool")
	yaml := crashConfig(ns, kb.Addr, nsrv.URL(), spoolDir)
	if err := os.WriteFile(p.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	brokersUp := true
	up := func() {
		if !brokersUp {
			kb.Restart(t)
			nsrv.Begin()
			brokersUp = true
		}
	}
	down := func() {
		if brokersUp {
			kb.Kill()
			nsrv.Kill()
			brokersUp = false
		}
	}

	// The sampler records, every 200 ms, whether each sink's spool is
	// full: a full spool folds new changes in memory, where a SIGKILL
	// loses them without a conflated event to declare them (by design;
	// docs/operations.md, Spool), so those versions are counted apart.
	samples := &fullSampler{}
	samplerDone := samples.run(200 * time.Millisecond)
	defer samplerDone()

	// Each run gets its own stdout file and metrics port; the stdout sink
	// never fails, so together the files are what kubewire observed.
	var outs []func() []event.Event
	var runs []string
	start := func() (*exec.Cmd, string) {
		port := testkit.FreePort(t)
		name := fmt.Sprintf("run-%d.jsonl", len(runs)+1)
		// Every run resumes from the checkpoint the previous one saved
		// (issue 26), and from its spool's position.
		cmd, out := p.start(t, name, "--http-address", fmt.Sprintf("127.0.0.1:%d", port), "--checkpoint", ns+"/kubewire-checkpoint")
		outs = append(outs, out)
		runs = append(runs, name)
		url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		samples.watch(url)
		return cmd, url
	}
	// watchedFrom is when the current run was last seen running.
	var watchedFrom time.Time
	// running waits until the run serves /metrics and its informer has
	// listed: kubewire is running, not starting.
	running := func(url string) {
		testkit.Eventually(t, "kubewire to list its ConfigMaps", func() bool {
			m, ok := scrape(url)
			return ok && m.get("kubewire_informer_synced", "", "") == 1
		})
		watchedFrom = time.Now()
	}
	// watched are the spans in which a run was known to be watching.
	var watched [][2]time.Time
	// connected waits, for at most 20 s, until both broker sinks are
	// healthy: after an outage kubewire reconnects within its retry
	// backoff (up to 7.5 s), and a kill before that is not one while the
	// spool drains. It reports whether they were.
	connected := func(url string) bool {
		return pollFor(20*time.Second, 50*time.Millisecond, func() bool {
			m, ok := scrape(url)
			return ok && m.get("kubewire_sink_healthy", "sink", "kafka") == 1 && m.get("kubewire_sink_healthy", "sink", "js") == 1
		})
	}

	stop := make(chan struct{})
	wg := churnObjects(ns, stop, churnTick, crashObjects)
	churning := true
	defer func() {
		if churning {
			close(stop)
			wg.Wait()
		}
	}()

	var kills []crashKill
	var moments []string
	began := time.Now()
	for c := 1; c <= cycles; c++ {
		m := crashMoment(rnd.IntN(4))
		moments = append(moments, m.String())
		var cmd *exec.Cmd
		var url string
		var delay time.Duration
		watchedFrom = time.Time{}
		switch m {
		case duringOutage:
			// Both brokers die under a running kubewire (if they are
			// already down, it runs into the outage that goes on).
			cmd, url = start()
			running(url)
			if brokersUp && !connected(url) {
				t.Logf("cycle %d: the sinks did not connect within 20 s before the outage", c)
			}
			down()
			delay = between(500*time.Millisecond, 5*time.Second)
		case restartIntoOutage:
			down()
			cmd, url = start()
			delay = between(0, 2*time.Second)
		case whileDraining:
			// An outage long enough to spool, then the brokers return
			// and kubewire drains its spool into them.
			cmd, url = start()
			running(url)
			if brokersUp {
				down()
				time.Sleep(between(time.Second, 3*time.Second)) // the outage's chosen length
			}
			up()
			if !connected(url) {
				t.Logf("cycle %d: the sinks did not reconnect within 20 s of the brokers' return", c)
			}
			delay = between(0, 3*time.Second)
		case duringSnapshot:
			// A start is a snapshot: the initial list, with markers,
			// and every 10 s another.
			cmd, url = start()
			delay = between(0, 2*time.Second)
		}
		// The chosen moment's delay, not a synchronisation.
		time.Sleep(delay)
		k := crashKill{cycle: c, moment: m, delay: delay, memory: map[string]float64{}, spooled: map[string]float64{},
			conflated: map[string]float64{}, full: map[string]float64{}, diskBytes: map[string]int64{}}
		scrapedAt := time.Now()
		if mt, ok := scrape(url); ok {
			k.scraped = true
			for _, s := range crashSinks {
				k.memory[s] = mt.get("kubewire_buffer_events", "sink", s)
				k.spooled[s] = mt.get("kubewire_spool_events", "sink", s)
				k.conflated[s] = mt.sum("kubewire_events_conflated_total", "sink", s)
				k.full[s] = mt.get("kubewire_spool_full", "sink", s)
			}
		}
		for _, s := range crashSinks {
			k.diskBytes[s] = dirBytes(filepath.Join(spoolDir, s))
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		k.at = time.Now()
		if !watchedFrom.IsZero() {
			watched = append(watched, [2]time.Time{watchedFrom, k.at})
		}
		_ = cmd.Wait()
		k.scrapeToKill = k.at.Sub(scrapedAt)
		k.arrivals = wg.writtenBetween(scrapedAt.Add(-crashLatency), k.at)
		kills = append(kills, k)
		t.Logf("cycle %d: %s, killed after %s (brokers %s): in memory kafka %.0f js %.0f; spool events kafka %.0f js %.0f (full %.0f/%.0f, %.0f/%.0f folded this run); spool dir kafka %d KB js %d KB; scrape→kill %s, %d versions written from %s before the scrape to the kill",
			c, m, delay.Round(time.Millisecond), map[bool]string{true: "up", false: "down"}[brokersUp], k.memory["kafka"], k.memory["js"],
			k.spooled["kafka"], k.spooled["js"], k.full["kafka"], k.full["js"], k.conflated["kafka"], k.conflated["js"],
			k.diskBytes["kafka"]>>10, k.diskBytes["js"]>>10, k.scrapeToKill.Round(time.Microsecond), k.arrivals, crashLatency)
		// A moment's pause before the restart, as a supervisor takes.
		time.Sleep(between(0, 500*time.Millisecond))
	}
	t.Logf("%d cycles took %s", cycles, time.Since(began).Round(time.Second))

	// The last start: brokers up, kubewire drains its spool, and the churn
	// stops so that the sinks can converge.
	up()
	final, url := start()
	defer final.Process.Kill()
	running(url)
	close(stop)
	wg.Wait()
	churning = false
	watched = append(watched, [2]time.Time{watchedFrom, time.Now()})
	testkit.Within(t, 3*time.Minute, "kubewire to drain its memory and spool into both sinks", func() bool {
		m, ok := scrape(url)
		if !ok {
			return false
		}
		for _, s := range crashSinks {
			if m.get("kubewire_buffer_events", "sink", s) != 0 || m.get("kubewire_spool_events", "sink", s) != 0 {
				return false
			}
		}
		return true
	})

	// What kubewire observed: every version any run wrote to stdout, by
	// the first run (from 1) that did.
	observed := map[string]int{}
	for i, out := range outs {
		for _, ev := range out() {
			k := apptest.Ext(ev, encoding.ExtPartitionKey) + "@" + apptest.Ext(ev, encoding.ExtResourceVersion)
			if observed[k] == 0 {
				observed[k] = i + 1
			}
		}
	}
	finalFolded := map[string]float64{}
	if m, ok := scrape(url); ok {
		for _, s := range crashSinks {
			finalFolded[s] = m.sum("kubewire_events_conflated_total", "sink", s)
		}
	}
	samplerDone()
	bound := int64(crashSpool) + spool.FileBytes(crashSpool) + 64<<10
	maxDisk := map[string]int64{}
	for _, k := range kills {
		for _, s := range crashSinks {
			maxDisk[s] = max(maxDisk[s], k.diskBytes[s])
			if k.diskBytes[s] > bound {
				t.Errorf("%s: cycle %d (%s): the spool directory held %d bytes, over its bound of %d (maxBytes %d, one %d-byte file, 64 KiB of metadata)",
					s, k.cycle, k.moment, k.diskBytes[s], bound, crashSpool, spool.FileBytes(crashSpool))
			}
		}
	}

	// The stdout files stand for what kubewire observed. A version
	// written well inside a span in which a run was known to be
	// watching must be among them; if not, the oracle is wrong (or
	// the informer skipped a change), and the lost counts below with it.
	unseen := wg.lostVersions(nil, observed).unseen
	var unseenWatched []lostVersion
	for _, v := range unseen {
		for _, w := range watched {
			if v.at.After(w[0].Add(crashLatency)) && v.at.Before(w[1].Add(-crashLatency)) {
				unseenWatched = append(unseenWatched, v)
				break
			}
		}
	}
	t.Logf("%d versions were written while no kubewire watched and changed again before the next one listed (never observed)", len(unseen))
	if len(unseenWatched) > 0 {
		t.Errorf("%d versions written while a run was watching were never observed: %v", len(unseenWatched), lostSet{versions: unseenWatched}.describe(10))
	}
	var summary []string
	for _, sink := range crashSinks {
		rep := verifyUntilSettled(t, cfg, sink)
		for _, rr := range rep.Resources {
			if len(rr.Divergent) > 0 {
				t.Errorf("%s: the final view differs from the cluster: %v", sink, rr.Divergent)
			}
		}
		recs := readPartitioned(t, cfg, sink)
		evs := make([]event.Event, len(recs))
		for i, r := range recs {
			evs[i] = r.ev
		}
		// A kill can make kubewire deliver again, after newer events of
		// their keys, the events it read back from its spool in the last
		// second before it (go-diskqueue keeps its read position on disk
		// at each sync only; docs/events.md, "A replayed suffix"). Those
		// copies carry their first copy's id, and a consumer skips them as
		// older than what it holds. What must never happen is a first
		// copy out of order: the write order is checked on first copies.
		firsts, replays := firstCopies(evs)
		// A version a conflated event declared folded (its range
		// [conflatedfrom, resourceversion)) may come again on its own
		// after a kill: the watch resumes from a checkpoint before the
		// fold was delivered. It is late, not out of order: the fold
		// already stood for it, and consumers skip it as older than what
		// they hold. What must not happen is a version nothing declared
		// coming out after a newer one.
		foldRanges := declaredFolds(evs)
		lateFolded := 0
		kept := firsts[:0:0]
		for _, ev := range firsts {
			if inGap(foldRanges[apptest.Ext(ev, encoding.ExtPartitionKey)], apptest.Ext(ev, encoding.ExtResourceVersion)) {
				lateFolded++
				continue
			}
			kept = append(kept, ev)
		}
		t.Logf("%s: %d versions declared folded came again on their own after a kill", sink, lateFolded)
		order, checked := wg.outOfOrder(kept)
		if checked == 0 {
			t.Errorf("%s: no event carried a version the test wrote", sink)
		}
		for _, v := range rep.OrderViolations {
			t.Logf("%s: stale event (verify; a replayed copy unless the write-order check below fails): %s", sink, v)
		}
		t.Logf("%s: %d events were copies, after newer events, of events delivered before a kill", sink, replays)
		for _, v := range order {
			t.Errorf("%s: order violation (write order): %s", sink, v)
		}
		// Each violating key's events as the sink holds them, to tell a
		// replayed run of events (a non-adjacent duplicate) from a
		// reordering.
		shown := map[string]bool{}
		for _, v := range order {
			key := v[:strings.IndexByte(v, ':')]
			if shown[key] || len(shown) == 3 {
				continue
			}
			shown[key] = true
			id := v[strings.Index(v, " (")+2 : strings.Index(v, ") came")]
			var seq []string
			at := 0
			for i, r := range recs {
				if apptest.Ext(r.ev, encoding.ExtPartitionKey) == key && r.ev.Type() != encoding.TypeSnapshotStarted && r.ev.Type() != encoding.TypeSnapshotCompleted {
					if r.ev.ID() == id {
						at = len(seq)
					}
					seq = append(seq, fmt.Sprintf("#%d p%s %s", i, r.part, r.ev.ID()))
				}
			}
			t.Logf("%s: %s in the sink, around the violation: %s", sink, key, strings.Join(seq[max(at-8, 0):min(at+4, len(seq))], ", "))
		}
		falseDeletes, markers := checkSnapshots(recs)
		for _, f := range falseDeletes {
			t.Errorf("%s: false delete: %s", sink, f)
		}
		all := wg.lostVersions(evs, observed)
		// A version written while the sink's spool was full was folded
		// in memory; if the fold was delivered it is declared (counted in
		// all.conflated), if a SIGKILL took it, it is gone undeclared.
		// Those are counted apart; the rest must be what memory held.
		lost, folded := all, all
		lost.versions, folded.versions = nil, nil
		for _, v := range all.versions {
			if samples.fullNear(sink, v.at, crashLatency) {
				folded.versions = append(folded.versions, v)
			} else {
				lost.versions = append(lost.versions, v)
			}
		}
		lost.n, folded.n = len(lost.versions), len(folded.versions)
		var reported, tolerance, folds float64
		for _, k := range kills {
			reported += k.memory[sink]
			tolerance += float64(k.arrivals)
			folds += k.conflated[sink]
		}
		folds += finalFolded[sink]
		perKill := attribute(lost, kills)
		perKillFolded := attribute(folded, kills)
		for i, k := range kills {
			t.Logf("%s: kill %d (%s): %d lost versions written before it (since the previous kill), %d more while the spool was full; reported in memory %.0f, %d arrivals, %.0f folded in that run",
				sink, k.cycle, k.moment, perKill[i], perKillFolded[i], k.memory[sink], k.arrivals, k.conflated[sink])
		}
		// With the resume (issue 26) every version written is in the
		// sink, or inside a gap the stream declared: what memory held at
		// a kill, and what was written while no kubewire ran, comes again
		// from the checkpoint.
		gaps := declaredGaps(t, evs)
		outside := 0
		var outsideDesc []string
		for key, idx := range wg.missing(evs) {
			for _, i := range idx {
				rv := wg.written[key][i]
				if !inGap(gaps, rv) && !inGap(foldRanges[key], rv) {
					outside++
					if len(outsideDesc) < 10 {
						outsideDesc = append(outsideDesc, fmt.Sprintf("%s #%d (rv %s)", key, i, rv))
					}
				}
			}
		}
		if outside > 0 {
			t.Errorf("%s: %d versions written are missing outside every declared gap (%d gaps): %v", sink, outside, len(gaps), outsideDesc)
		}
		t.Logf("%s: %d gaps declared; %d versions missing outside them", sink, len(gaps), outside)
		if folded.n > 0 {
			t.Logf("%s: %d observed versions written while its spool was full are missing (folded in memory, then killed): %v", sink, folded.n, folded.describe(5))
		}
		line := fmt.Sprintf("%s: %d changes written, %d events (%d duplicates), %d stale events in verify, %d first copies out of order, %d false deletes (%d markers complete, %d incomplete), %d versions missing outside %d declared gaps (%.0f in memory at the kills; %.0f folds), max spool dir %d KB (bound %d KB)",
			sink, wg.changes.Load(), rep.Events, rep.Duplicates, len(rep.OrderViolations), len(order), len(falseDeletes), markers.complete, markers.incomplete,
			outside, len(gaps), reported, folds, maxDisk[sink]>>10, bound>>10)
		summary = append(summary, line)
		record(fmt.Sprintf("crash cycles (seed %d, %d cycles: %s; %s)", seed, cycles, momentCounts(moments), line), wg.changes.Load(), rep.Events, rep.Duplicates, len(order)+len(falseDeletes))
	}
	t.Logf("SUMMARY crash consistency: seed %d, %d cycles [%s]; %s", seed, cycles, strings.Join(moments, " "), strings.Join(summary, "; "))
	if t.Failed() {
		// What kubewire said about its spool and snapshots, without the
		// start-up notice every run after a kill gives and the retries.
		for _, r := range runs {
			for _, line := range strings.Split(p.stderr[r].String(), "\n") {
				if strings.Contains(line, "ended without a clean shutdown") || strings.Contains(line, "connect failed") || strings.Contains(line, "asynchronous error") {
					continue
				}
				if strings.Contains(line, "incomplete") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "spool") {
					t.Logf("%s: %s", r, line)
				}
			}
		}
	}
}

// crashConfig routes ns's ConfigMaps to Kafka, JetStream and stdout with a
// small memory buffer, a spool of crashSpool bytes per broker sink, and
// snapshots every 10 s.
func crashConfig(ns, kafkaAddr, natsURL, spoolDir string) string {
	yaml := brokerConfig(ns, kafkaAddr, natsURL,
		fmt.Sprintf("dispatch: {bufferEvents: %d, drainTimeout: 10s, spoolDir: %q}\n", crashBuffer, spoolDir), withStdout)
	yaml = strings.Replace(yaml, "sinks: [kafka", fmt.Sprintf("snapshotInterval: %s, sinks: [kafka", snapshotEvery), 1)
	for _, typ := range []string{"kafka", "nats"} {
		yaml = strings.Replace(yaml, "    type: "+typ+"\n", fmt.Sprintf("    type: %s\n    overflow: spool\n    spool: {maxBytes: %d}\n", typ, crashSpool), 1)
	}
	return yaml
}

// metricsText is a scrape of /metrics.
type fullSampler struct {
	mu      sync.Mutex
	url     string
	samples []fullSample
}

type fullSample struct {
	at   time.Time
	full map[string]bool
}

// watch makes url, a new run's /metrics, the one sampled.
func (s *fullSampler) watch(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.url = url
}

// run samples every interval until the returned function is called.
func (s *fullSampler) run(every time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			s.mu.Lock()
			url := s.url
			s.mu.Unlock()
			m, ok := scrape(url)
			if url == "" || !ok {
				continue // between runs
			}
			f := map[string]bool{}
			for _, sink := range crashSinks {
				f[sink] = m.get("kubewire_spool_full", "sink", sink) == 1
			}
			s.mu.Lock()
			s.samples = append(s.samples, fullSample{at: time.Now(), full: f})
			s.mu.Unlock()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// fullNear reports whether a sample from a sampling interval before at to
// margin after it (the change reaching kubewire) found sink's spool full.
func (s *fullSampler) fullNear(sink string, at time.Time, margin time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.samples), func(i int) bool { return !s.samples[i].at.Before(at.Add(-200 * time.Millisecond)) })
	for ; i < len(s.samples) && !s.samples[i].at.After(at.Add(margin)); i++ {
		if s.samples[i].full[sink] {
			return true
		}
	}
	return false
}

// writtenBetween counts the versions the churn wrote in [from, to].
func (c *churner) writtenBetween(from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ts := range c.at {
		for _, at := range ts {
			if !at.Before(from) && !at.After(to) {
				n++
			}
		}
	}
	return n
}

// lostSet is the versions a sink lacks although kubewire observed them and
// no conflated event declares them folded.
type lostSet struct {
	n, missing, unobserved, conflated int
	versions                          []lostVersion
	// unseen are the versions no run observed.
	unseen []lostVersion
}

type lostVersion struct {
	key string
	pos int
	rv  string
	at  time.Time
	run int // the first run that observed it
}

// lostVersions compares what the churn wrote with a sink's events. A
// version missing from the sink is not lost if kubewire never observed it
// (written while no kubewire ran, and changed again before the next one
// listed) or if a conflated event of its key declares it: an event with
// conflated=N stands for the N versions before its own.
func (c *churner) lostVersions(evs []event.Event, observed map[string]int) lostSet {
	missing := c.missing(evs)
	c.mu.Lock()
	defer c.mu.Unlock()
	declared := map[string]map[int]bool{}
	for _, ev := range evs {
		n, err := strconv.Atoi(apptest.Ext(ev, encoding.ExtConflated))
		if err != nil || n <= 0 {
			continue
		}
		k := apptest.Ext(ev, encoding.ExtPartitionKey)
		rv := apptest.Ext(ev, encoding.ExtResourceVersion)
		for i, w := range c.written[k] {
			if w != rv {
				continue
			}
			if declared[k] == nil {
				declared[k] = map[int]bool{}
			}
			for j := max(i-n, 0); j < i; j++ {
				declared[k][j] = true
			}
		}
	}
	var out lostSet
	for k, pos := range missing {
		for _, i := range pos {
			out.missing++
			switch rv := c.written[k][i]; {
			case observed[k+"@"+rv] == 0:
				out.unobserved++
				out.unseen = append(out.unseen, lostVersion{key: k, pos: i, rv: rv, at: c.at[k][i]})
			case declared[k][i]:
				out.conflated++
			default:
				out.n++
				out.versions = append(out.versions, lostVersion{key: k, pos: i, rv: rv, at: c.at[k][i], run: observed[k+"@"+rv]})
			}
		}
	}
	sort.Slice(out.versions, func(i, j int) bool { return out.versions[i].at.Before(out.versions[j].at) })
	return out
}

func (l lostSet) describe(n int) string {
	var parts []string
	for i, v := range l.versions {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(l.versions)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s #%d (rv %s, written %s, observed by run-%d)", v.key, v.pos, v.rv, v.at.Format("15:04:05.000"), v.run))
	}
	return strings.Join(parts, ", ")
}

// attribute counts lost versions by the first kill after they were
// written; the last slot counts those written after every kill. A version
// read back from the spool may be lost at a later kill than this, so the
// counts are for the log, and the assertion is on their sum.
func attribute(l lostSet, kills []crashKill) []int {
	out := make([]int, len(kills)+1)
	for _, v := range l.versions {
		i := sort.Search(len(kills), func(i int) bool { return !kills[i].at.Before(v.at) })
		out[i]++
	}
	return out
}

// partitioned is an event and the partition it was read from ("" for a
// stream).
type markerCounts struct{ complete, incomplete int }

// checkSnapshots applies the consumer's snapshot rule (docs/events.md) to
// the events of one sink, partition by partition, and returns what would
// make a consumer delete a live object: a completed marker without
// incomplete whose snapshot lacks records (fewer keys with a synced record
// of it than its count, unless a conflated event in the window stands for
// the folded record), or whose window would prune a key that has a synced
// record of the snapshot outside it.
func checkSnapshots(recs []partitioned) (problems []string, markers markerCounts) {
	type window struct{ start int }
	type lastEv struct {
		seq     int
		deleted bool
	}
	windows := map[string]window{}         // partition|snapshot -> window
	last := map[string]map[string]lastEv{} // partition -> key -> its last event
	synced := map[string]map[string]bool{} // snapshot -> keys with a synced record of it
	for _, r := range recs {
		if r.ev.Type() == encoding.TypeSynced {
			sid := apptest.Ext(r.ev, encoding.ExtSnapshotID)
			if synced[sid] == nil {
				synced[sid] = map[string]bool{}
			}
			synced[sid][apptest.Ext(r.ev, encoding.ExtPartitionKey)] = true
		}
	}
	type verdict struct {
		count     int
		covered   map[string]bool // keys without a synced record that a conflated event in the window stands for
		outside   []string
		pruned    bool
		seenID    bool
		incomplet bool
	}
	snaps := map[string]*verdict{}
	seq := 0
	for _, r := range recs {
		seq++
		ev := r.ev
		sid := apptest.Ext(ev, encoding.ExtSnapshotID)
		key := apptest.Ext(ev, encoding.ExtPartitionKey)
		switch ev.Type() {
		case encoding.TypeSnapshotStarted:
			windows[r.part+"|"+sid] = window{start: seq}
			continue
		case encoding.TypeSnapshotCompleted:
			v := snaps[sid]
			if v == nil {
				v = &verdict{covered: map[string]bool{}}
				snaps[sid] = v
			}
			_, incomplete := ev.Extensions()[encoding.ExtIncomplete]
			if !v.seenID {
				v.seenID = true
				if incomplete {
					markers.incomplete++
				} else {
					markers.complete++
				}
			}
			w, ok := windows[r.part+"|"+sid]
			if !ok {
				continue // unmatched: prunes nothing
			}
			delete(windows, r.part+"|"+sid)
			if incomplete {
				v.incomplet = true
				continue
			}
			v.pruned = true
			v.count = snapshotCount(ev)
			for k, l := range last[r.part] {
				if l.seq < w.start && !l.deleted && synced[sid][k] {
					v.outside = append(v.outside, k)
				}
			}
			for _, cr := range recs[w.start : seq-1] {
				if cr.part != r.part {
					continue
				}
				ck := apptest.Ext(cr.ev, encoding.ExtPartitionKey)
				if _, c := cr.ev.Extensions()[encoding.ExtConflated]; c && !synced[sid][ck] {
					v.covered[ck] = true
				}
			}
			continue
		}
		if last[r.part] == nil {
			last[r.part] = map[string]lastEv{}
		}
		last[r.part][key] = lastEv{seq: seq, deleted: ev.Type() == encoding.TypeDeleted}
	}
	ids := make([]string, 0, len(snaps))
	for id := range snaps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := snaps[id]
		if !v.pruned {
			continue
		}
		if have := len(synced[id]) + len(v.covered); have < v.count {
			problems = append(problems, fmt.Sprintf("snapshot %s: completed without incomplete, count %d, but only %d keys have a synced record of it (%d more stand for folded ones)",
				id, v.count, len(synced[id]), len(v.covered)))
		}
		if len(v.outside) > 0 {
			sort.Strings(v.outside)
			problems = append(problems, fmt.Sprintf("snapshot %s: its completed marker prunes %v, whose synced records lie outside its window", id, v.outside))
		}
	}
	return problems, markers
}

func snapshotCount(ev event.Event) int {
	var m encoding.SnapshotMarker
	if err := ev.DataAs(&m); err != nil || m.Count == nil {
		return 0
	}
	return *m.Count
}

// verifyUntilSettled polls verify until the sink's view equals the cluster,
// and returns the report; unlike verifyUntilConverged it returns order
// violations (which do not go away) for the caller to report with the rest.
func verifyUntilSettled(t *testing.T, cfg *config.Config, sink string) *verify.Report {
	t.Helper()
	var rep *verify.Report
	var lastErr error
	settled := func() bool {
		r, err := verify.Run(context.Background(), verify.Options{Config: cfg, Sink: sink, REST: cluster.RESTConfig(testcluster.AdminUser)})
		if err != nil {
			lastErr = err
			return false
		}
		rep = r
		for _, rr := range r.Resources {
			if len(rr.Divergent) > 0 {
				return false
			}
		}
		return true
	}
	pollFor(90*time.Second, 200*time.Millisecond, settled)
	if rep == nil {
		t.Fatalf("%s: verify never ran: %v", sink, lastErr)
	}
	return rep
}

// firstCopies keeps the first event of each id, as a consumer that skips
// ids it has seen applies them, and counts the later copies that came after
// a newer event of their key (a replay rather than a retry).
func firstCopies(evs []event.Event) (firsts []event.Event, replays int) {
	seen := map[string]bool{}
	newest := map[string]int{} // key -> index in evs of its newest first copy
	for i, ev := range evs {
		if seen[ev.ID()] {
			key := apptest.Ext(ev, encoding.ExtPartitionKey)
			if newest[key] > 0 && evs[newest[key]-1].ID() != ev.ID() {
				replays++
			}
			continue
		}
		seen[ev.ID()] = true
		firsts = append(firsts, ev)
		newest[apptest.Ext(ev, encoding.ExtPartitionKey)] = i + 1
	}
	return firsts, replays
}

// pollFor checks cond every interval until it holds or d has passed, and
// reports whether it held: a wait whose timeout is an outcome the caller
// handles, not a failure.
func pollFor(d, every time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

type rvRange struct{ from, to uint64 }

// declaredGaps are the ranges the stream's gap events declare.
func declaredGaps(t *testing.T, evs []event.Event) []rvRange {
	t.Helper()
	var out []rvRange
	for _, ev := range evs {
		if ev.Type() != encoding.TypeGap {
			continue
		}
		var g encoding.Gap
		if err := ev.DataAs(&g); err != nil {
			t.Fatal(err)
		}
		out = append(out, rvRange{rvNumber(t, g.From), rvNumber(t, g.To)})
	}
	return out
}

// declaredFolds are, per key, the ranges conflated events declare: a
// conflated event stands for the versions from its conflatedfrom up to,
// not including, its own.
func declaredFolds(evs []event.Event) map[string][]rvRange {
	out := map[string][]rvRange{}
	for _, ev := range evs {
		from, err1 := strconv.ParseUint(apptest.Ext(ev, encoding.ExtConflatedFrom), 10, 64)
		to, err2 := strconv.ParseUint(apptest.Ext(ev, encoding.ExtResourceVersion), 10, 64)
		if err1 != nil || err2 != nil || from == 0 {
			continue
		}
		key := apptest.Ext(ev, encoding.ExtPartitionKey)
		// inGap takes (from, to]: the range [from, to) as such.
		out[key] = append(out[key], rvRange{from - 1, to - 1})
	}
	return out
}

func inGap(gaps []rvRange, rv string) bool {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false
	}
	for _, g := range gaps {
		if n > g.from && n <= g.to {
			return true
		}
	}
	return false
}
