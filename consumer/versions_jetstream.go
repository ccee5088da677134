package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamVersionsConfig says which stream and object VersionsJetStream
// reads, and the range of its versions.
type JetStreamVersionsConfig struct {
	// JetStream, Stream and Subject are as in JetStreamHistoryConfig.
	JetStream jetstream.JetStream
	Stream    string
	Subject   string
	// Key, the range, WatchPerNamespace and Now are as in VersionsConfig.
	Key              string
	SinceRV, UntilRV uint64
	Since, Until     time.Time
	// Lookback is as in VersionsConfig, measured in the times the server
	// stored the messages, as in JetStreamHistoryConfig.
	Lookback          time.Duration
	WatchPerNamespace bool
	Now               func() time.Time
}

// VersionsJetStream is Versions for a stream written by kubewire's NATS
// sink in JetStream mode: the stream is the one partition. As
// HistoryAtJetStream, it does not look at the stream's limits: a stream
// that keeps a few messages per subject has lost versions, and the caller
// must refuse it.
func VersionsJetStream(ctx context.Context, cfg JetStreamVersionsConfig) (*ObjectVersions, error) {
	if cfg.JetStream == nil || cfg.Stream == "" || cfg.Key == "" {
		return nil, errors.New("consumer: versions needs a JetStream client, a stream and a key")
	}
	st, err := cfg.JetStream.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("consumer: stream %s: %w", cfg.Stream, err)
	}
	state := st.CachedInfo().State
	r := &jsHistory{js: cfg.JetStream, stream: cfg.Stream, subject: cfg.Subject, last: state.LastSeq}
	first, err := r.firstAt(ctx, nil)
	if err != nil {
		return nil, err
	}
	return versionsIn(ctx, VersionsConfig{
		Key: cfg.Key, SinceRV: cfg.SinceRV, Since: cfg.Since, UntilRV: cfg.UntilRV, Until: cfg.Until,
		Lookback: cfg.Lookback, WatchPerNamespace: cfg.WatchPerNamespace, Now: cfg.Now,
	}, versionsSource{
		// A stream whose first message is its first sequence lost none.
		where: "stream " + cfg.Stream, whole: state.FirstSeq <= 1,
		start: func(ctx context.Context, t time.Time) (Positions, bool, error) {
			seq, err := r.firstAt(ctx, &t)
			if err != nil {
				return nil, false, err
			}
			return Positions{cfg.Stream: int64(seq)}, seq <= first, nil
		},
		read: r.read,
	})
}
