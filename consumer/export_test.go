package consumer

// StateOf and Adopt let the tests of package consumer_test hand a
// partition from one View to another, as a consumer group does.
func (v *View) StateOf(partition string) ([]byte, error) {
	b, _, err := v.partitionState(partition)
	return b, err
}

func (v *View) Adopt(partition string, state []byte) error { return v.adopt(partition, state) }

func (v *View) Release(partition string) { v.release(partition) }
