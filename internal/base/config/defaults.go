package config

import (
	"math"
	"strconv"
	"time"
)

// Defaults and limits. See docs/configuration.md for the reasoning.
const (
	DefaultQPS          = 50
	DefaultBurst        = 100
	DefaultShards       = 16
	MaxShards           = 1024
	DefaultBufferEvents = 10000
	// DefaultBufferBytes keeps the memory of a few sinks well inside the
	// chart's 512Mi limit; the spool takes the rest.
	DefaultBufferBytes   = 32 << 20
	DefaultSpoolMaxBytes = 1 << 30
	// MinSpoolBytes is the smallest spool.maxBytes: room for a couple of
	// the largest objects the apiserver serves (etcd's limit is 1.5 MiB).
	MinSpoolBytes           = 4 << 20
	DefaultSpoolDir         = "/var/lib/kubewire/spool"
	DefaultBatchSize        = 100
	MaxBatchSize            = 10000
	DefaultDrainTimeout     = 30 * time.Second
	DefaultSnapshotInterval = 30 * time.Minute
	MinSnapshotInterval     = 10 * time.Second
)

// ApplyDefaults fills in every field left at its zero value. Parse and Load
// call it already; it is exported for configurations built in code. Unlike
// Parse, it cannot tell an explicit 0 from an omitted field, so zero numbers
// are always replaced (use NewDuration(0) to keep a zero snapshotInterval).
// It is idempotent.
func (c *Config) ApplyDefaults() {
	applyDefaults(c, nil)
	defaultSinkBlocks(c)
}

// defaultSinkBlocks fills in the defaults of every sink's block. It runs
// after validation when loading a file, so that a block's rules can tell
// what the file left out.
func defaultSinkBlocks(c *Config) {
	for i := range c.Sinks {
		if b := c.Sinks[i].Block; b != nil {
			b.Default()
		}
	}
}

// applyDefaults fills in defaults. given holds the field paths that were
// present in the file: a number written explicitly as 0 is left alone so
// that validation can reject it rather than silently replacing it.
func applyDefaults(c *Config, given map[string]bool) {
	if c.Client.QPS == 0 && !given["client.qps"] {
		c.Client.QPS = DefaultQPS
	}
	if c.Client.Burst == 0 && !given["client.burst"] {
		c.Client.Burst = DefaultBurst
		// A burst below qps is invalid; do not make an omitted burst the
		// reason a file with a high qps fails validation.
		if q := float64(c.Client.QPS); q > DefaultBurst && q <= math.MaxInt32 {
			c.Client.Burst = int(math.Ceil(q))
		}
	}

	d := &c.Dispatch
	if d.Shards == 0 && !given["dispatch.shards"] {
		d.Shards = DefaultShards
	}
	if d.BufferEvents == 0 && !given["dispatch.bufferEvents"] {
		d.BufferEvents = DefaultBufferEvents
	}
	if d.BufferBytes == 0 && !given["dispatch.bufferBytes"] {
		d.BufferBytes = DefaultBufferBytes
	}
	if d.BatchSize == 0 && !given["dispatch.batchSize"] {
		d.BatchSize = DefaultBatchSize
	}
	if d.SpoolDir == "" {
		d.SpoolDir = DefaultSpoolDir
	}
	d.DrainTimeout.Default(DefaultDrainTimeout)

	for i := range c.Resources {
		r := &c.Resources[i]
		if r.Operations == nil {
			r.Operations = Operations()
		}
		r.SnapshotInterval.Default(DefaultSnapshotInterval)
		applyShapeDefaults(r)
	}

	for i := range c.Sinks {
		s := &c.Sinks[i]
		if s.Overflow == "" {
			s.Overflow = OverflowSpool
		}
		if s.Spool.MaxBytes == 0 && !given["sinks["+strconv.Itoa(i)+"].spool.maxBytes"] {
			s.Spool.MaxBytes = DefaultSpoolMaxBytes
		}
		if s.Spool.Fsync == "" {
			s.Spool.Fsync = FsyncInterval
		}
	}
}

// Unset reports whether the duration was neither given nor defaulted.
func (d Duration) Unset() bool {
	return !d.set && d.Duration == 0 && d.invalid == ""
}

// Default sets the duration to v if it is Unset; a duration given, even
// as 0, stays.
func (d *Duration) Default(v time.Duration) {
	if d.Unset() {
		d.Duration = v
	}
}

// Clone returns a pointer to a copy of *p, or nil for nil: a block's
// Defaulted shares no pointers with the block.
func Clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// CopyOr returns a pointer to a copy of *p, or to def when p is nil: the
// defaulted value of an optional field.
func CopyOr[T any](p *T, def T) *T {
	if p != nil {
		def = *p
	}
	return &def
}
