package informer

// TrackedStream is one watch stream's progress on its own, for the tests of
// code that acknowledges Marks without a Watcher (the dispatchers).
type TrackedStream struct{ p *progress }

// NewTrackedStream starts a stream at checkpoint from.
func NewTrackedStream(from string) *TrackedStream { return &TrackedStream{p: newProgress(from)} }

// Add appends a change at rv that needs acks acknowledgements.
func (s *TrackedStream) Add(rv string, acks int) Mark { return s.p.add(rv, int32(acks)) }

// Checkpoint is the stream's checkpoint.
func (s *TrackedStream) Checkpoint() string {
	rv, _ := s.p.checkpoint()
	return rv
}

// Close forgets the stream.
func (s *TrackedStream) Close() { s.p.close() }

// SpoolPosition is the stream's spool position: the newest version up to
// which every change is done or written to a spool.
func (s *TrackedStream) SpoolPosition() string { return s.p.spoolPosition() }
