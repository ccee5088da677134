package nats

// The sink's collectors, for tests that read them.
var (
	Duplicates    = mDuplicates
	Oversized     = mOversized
	PendingAcks   = mPendingAcks
	PublishErrors = mPublishErrors
)
