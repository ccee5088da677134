package kafka

// The linger adapts to how units arrive. Waiting for more records pays
// when they come densely: a request then carries many and there are fewer
// of them. At a trickle (a few hundred events per second spread over the
// partitions) nothing comes within the linger, and waiting only delays
// each event by the full linger and costs a timer and a wake-up. So the
// loop lingers only for units that came within the linger of the unit
// before them; a unit that arrived alone goes at once.

import "time"

// arrive records u's arrival at p, for dense; p.mu is held.
func (p *partition) arrive(u *unit) {
	linger := p.s.cfg.Batch.Linger.Duration
	if linger <= 0 {
		return
	}
	now := time.Now()
	if p.last.IsZero() {
		u.gap = linger
	} else {
		u.gap = now.Sub(p.last)
	}
	p.last = now
}

// dense reports whether the loop should linger for more units after taking
// us: one of them came within the linger of the unit before it.
func (p *partition) dense(us []*unit) bool {
	linger := p.s.cfg.Batch.Linger.Duration
	for _, u := range us {
		if u.gap < linger {
			return true
		}
	}
	return false
}
