package dispatch

import (
	"sync"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// Item is one Change on its way to every sink that receives it. The
// CloudEvent is built once, by the first dispatcher that needs it, and shared.
type Item struct {
	Change *informer.Change

	// size is the object's byte size when the item was read back from a
	// spool, where Change.Object is gone.
	size int64
	// conflated is how many earlier changes were folded into it before it
	// was spooled, and folded their Marks; conflatedFrom is the
	// resourceVersion of the oldest of them ("" when a record of an older
	// kubewire did not say).
	conflated     int
	folded        []informer.Mark
	conflatedFrom string
	// old marks a record an earlier process spooled (Dispatcher.Replayed).
	old bool

	once sync.Once
	ev   *encoding.Event
	err  error
}

// NewItem wraps c for the dispatchers.
func NewItem(c *informer.Change) *Item { return &Item{Change: c} }

// Event returns the CloudEvent of the item, building it on first use.
func (it *Item) Event() (*encoding.Event, error) {
	it.once.Do(func() { it.ev, it.err = encoding.New(it.Change) })
	return it.ev, it.err
}

// resourceVersion is the version of the item's object: from the object, or
// for an item read back from a spool, whose object is gone, from its event.
func (it *Item) resourceVersion() string {
	if o := it.Change.Object; o != nil {
		return o.GetResourceVersion()
	}
	if ev, err := it.Event(); err == nil {
		return ev.Extension(encoding.ExtResourceVersion)
	}
	return ""
}

// bytes is the item's size as counted against Options.BufferBytes.
func (it *Item) bytes() int64 {
	if it.size > 0 {
		return it.size
	}
	return it.Change.Size()
}

func prefixOf(c *informer.Change) string {
	if c.Resource == nil {
		return ""
	}
	return c.Resource.KeyPrefix
}
