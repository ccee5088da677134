package shape

// Update modes: which updates of an object are emitted.
const (
	// UpdatesChanged (the default) emits an update only when the object
	// after transforms differs from the previous one outside the ignored
	// paths.
	UpdatesChanged = "changed"
	// UpdatesAll emits every update that changed the resourceVersion.
	UpdatesAll = "all"
	// UpdatesGenerationChanged emits an update only when
	// metadata.generation changed, that is, when the spec was edited.
	UpdatesGenerationChanged = "generationChanged"
)

// UpdateModes lists the update modes.
func UpdateModes() []string { return []string{UpdatesChanged, UpdatesAll, UpdatesGenerationChanged} }

// Reasons an update was suppressed, the label of the metric.
const (
	ReasonUnchanged  = "unchanged"
	ReasonIgnored    = "ignored_paths"
	ReasonGeneration = "generation_unchanged"
)

// alwaysIgnored are differences that never make an update worth sending:
// the resourceVersion changes on every write, and the private key carries
// who wrote, not what.
var alwaysIgnored = []Path{
	{{Key: "metadata"}, {Key: "resourceVersion"}},
	{{Key: PrivateKey}},
}

// Suppressor decides which updates are noise. The zero of *Suppressor (nil)
// suppresses nothing and costs one comparison with nil.
type Suppressor struct {
	mode   string
	base   *trie // alwaysIgnored
	ignore *trie // alwaysIgnored and the configured paths; nil without any
}

// NewSuppressor returns the suppressor for mode, or nil for UpdatesAll.
func NewSuppressor(mode string, ignorePaths []Path) *Suppressor {
	switch mode {
	case UpdatesAll:
		return nil
	case UpdatesGenerationChanged:
		return &Suppressor{mode: mode}
	}
	s := &Suppressor{mode: UpdatesChanged, base: unchangedPaths}
	if len(ignorePaths) > 0 {
		s.ignore = newTrie(append(append([]Path(nil), alwaysIgnored...), ignorePaths...))
	}
	return s
}

// unchangedPaths are what an update may change and still be no change at
// all; built once, read-only after.
var unchangedPaths = newTrie(alwaysIgnored)

// Unchanged reports whether old and new differ in nothing but what every
// update mode disregards (the resourceVersion, kubewire's private key): the
// comparison of updates: changed without ignorePaths, for a caller that
// picks its comparison by mode, as the raw cache compares bytes instead.
func Unchanged(old, new map[string]any) bool {
	return equalExcept(old, new, unchangedPaths)
}

// Suppress reports whether the update from old to new should not be
// emitted, and why. Both are objects after transforms.
func (s *Suppressor) Suppress(old, new map[string]any) (string, bool) {
	if s == nil {
		return "", false
	}
	if s.mode == UpdatesGenerationChanged {
		if Generation(old) == Generation(new) {
			return ReasonGeneration, true
		}
		return "", false
	}
	if s.ignore == nil {
		if equalExcept(old, new, s.base) {
			return ReasonUnchanged, true
		}
		return "", false
	}
	if !equalExcept(old, new, s.ignore) {
		return "", false
	}
	// Equal outside the ignored paths: say whether the ignored paths were
	// the reason, which is what a user tuning ignorePaths wants to see.
	if equalExcept(old, new, s.base) {
		return ReasonUnchanged, true
	}
	return ReasonIgnored, true
}

// Generation reads metadata.generation; an object without one has 0, so
// generationChanged suppresses every update of such a resource.
func Generation(obj map[string]any) int64 {
	md, _ := obj["metadata"].(map[string]any)
	switch g := md["generation"].(type) {
	case int64:
		return g
	case float64:
		return int64(g)
	}
	return 0
}
