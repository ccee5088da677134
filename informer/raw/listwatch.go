package raw

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// List is a list response whose items are raw Objects. It satisfies what
// the reflector needs of a list: meta.ListAccessor (through the embedded
// ListMeta) and meta.ExtractList (through Items).
type List struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []*Object
}

var _ runtime.Object = (*List)(nil)

func (l *List) GetObjectKind() schema.ObjectKind { return &l.TypeMeta }

// DeepCopyObject copies the list but shares the items, which are immutable.
func (l *List) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]*Object(nil), l.Items...)
	return &c
}

// NewRESTClient returns a client that speaks JSON to any group and version,
// configured as client-go's dynamic client configures its own, so the raw
// path sends the same requests with the same rate limits and auth.
func NewRESTClient(cfg *rest.Config) (rest.Interface, error) {
	c := dynamic.ConfigFor(cfg)
	c.GroupVersion = nil
	c.APIPath = ""
	// The dynamic client's serializer decodes only unstructured objects,
	// so an error's Status body (its reason and causes, such as "resource
	// version too large" after an etcd restore) was lost to a generic
	// error. This one decodes metav1.Status; the raw path decodes nothing
	// else through it.
	c.NegotiatedSerializer = serializer.NewCodecFactory(paramScheme).WithoutConversion()
	h, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, err
	}
	return rest.UnversionedRESTClientForConfigAndClient(c, h)
}

// paramCodec encodes ListOptions as query parameters, as the dynamic client
// does: the options types registered under a bare "v1".
var (
	paramScheme = runtime.NewScheme()
	paramCodec  = runtime.NewParameterCodec(paramScheme)
	versionV1   = schema.GroupVersion{Version: "v1"}
)

func init() { metav1.AddToGroupVersion(paramScheme, versionV1) }

// ListWatchOptions configure NewListWatch.
type ListWatchOptions struct {
	Client    rest.Interface
	GVR       schema.GroupVersionResource
	Namespace string // "" for all namespaces or cluster-scoped
	// Tweak edits the options of every request (selectors).
	Tweak func(*metav1.ListOptions)
	// Keep, when set, drops objects of other namespaces before they reach
	// the cache (several configured namespaces, one cluster-wide watch).
	Keep              func(namespace string) bool
	KeepManagedFields bool
	// Rewrite is applied to each object before it is cached (redaction).
	Rewrite func(map[string]any)
	// KeyPrefix is BuildOptions.KeyPrefix for every object.
	KeyPrefix string
	// WatchError, when set, is told of every ERROR event a watch receives.
	// The reflector turns such an
	// event into a relist without telling its error handler, so this is how
	// the caller learns that a watch was refused (410 at its start).
	WatchError func(err error)
}

// NewListWatch returns the list and watch functions of a ListerWatcher
// whose lists and watches yield raw Objects. The caller wraps them with
// cache.ToListWatcherWithWatchListSemantics(lw, o.Client), after any
// wrapping of its own: WatchList (streaming lists) then stays on, and the
// initial state arrives as watch events, decoded the same way.
func NewListWatch(o ListWatchOptions) *cache.ListWatch {
	path := "/apis/" + o.GVR.Group + "/" + o.GVR.Version
	if o.GVR.Group == "" {
		path = "/api/" + o.GVR.Version
	}
	if o.Namespace != "" {
		path += "/namespaces/" + o.Namespace
	}
	path += "/" + o.GVR.Resource
	lw := &listWatch{o: o, path: path}
	return &cache.ListWatch{
		ListWithContextFunc:  lw.list,
		WatchFuncWithContext: lw.watch,
	}
}

type listWatch struct {
	o    ListWatchOptions
	path string
}

func (lw *listWatch) build() BuildOptions {
	return BuildOptions{KeepManagedFields: lw.o.KeepManagedFields, Rewrite: lw.o.Rewrite, KeyPrefix: lw.o.KeyPrefix}
}

func (lw *listWatch) tweak(opts *metav1.ListOptions) {
	if lw.o.Tweak != nil {
		lw.o.Tweak(opts)
	}
}

func (lw *listWatch) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	lw.tweak(&opts)
	res := lw.o.Client.Get().AbsPath(lw.path).SpecificallyVersionedParams(&opts, paramCodec, versionV1).Do(ctx)
	// Error, unlike the error DoRaw returns, is the API server's Status.
	if err := res.Error(); err != nil {
		return nil, err
	}
	body, err := res.Raw()
	if err != nil {
		return nil, err
	}
	return ParseList(body, lw.build(), lw.o.Keep)
}

// ParseList slices the items out of a list response without decoding them.
// keep, when set, drops items of other namespaces.
func ParseList(body []byte, opt BuildOptions, keep func(string) bool) (*List, error) {
	s := str(body)
	if !gjson.Valid(s) {
		return nil, fmt.Errorf("raw: list response is not valid JSON")
	}
	l := &List{}
	var items gjson.Result
	gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "kind":
			l.Kind = strings.Clone(v.Str)
		case "apiVersion":
			l.APIVersion = strings.Clone(v.Str)
		case "metadata":
			v.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "resourceVersion":
					l.ResourceVersion = strings.Clone(v.Str)
				case "continue":
					l.Continue = strings.Clone(v.Str)
				case "remainingItemCount":
					if v.Type == gjson.Number {
						n := v.Int()
						l.RemainingItemCount = &n
					}
				}
				return true
			})
		case "items":
			items = v
		}
		return true
	})
	if kind, ok := strings.CutSuffix(l.Kind, "List"); ok && kind != "" {
		tm, _ := json.Marshal(kind)
		av, _ := json.Marshal(l.APIVersion)
		// In the order the apiserver writes them in watch events, so an
		// object listed and the same object watched have the same bytes
		// (the raw path's "unchanged update" check compares bytes).
		opt.TypeMeta = append(append(append([]byte(`"kind":`), tm...), `,"apiVersion":`...), av...)
	}
	var err error
	items.ForEach(func(_, v gjson.Result) bool {
		var o *Object
		if o, err = New(body[v.Index:v.Index+len(v.Raw)], opt); err != nil {
			return false
		}
		if keep == nil || keep(o.namespace) {
			l.Items = append(l.Items, o)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if l.Items == nil {
		l.Items = []*Object{}
	}
	return l, nil
}

func (lw *listWatch) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	lw.tweak(&opts)
	opts.Watch = true
	rc, err := lw.o.Client.Get().AbsPath(lw.path).SpecificallyVersionedParams(&opts, paramCodec, versionV1).Stream(ctx)
	if err != nil {
		return nil, err
	}
	dec := NewWatchDecoder(rc, lw.build())
	if lw.o.WatchError != nil {
		report := lw.o.WatchError
		dec.onError = func(st *metav1.Status) { report(apierrors.FromObject(st)) }
	}
	w := watch.NewStreamWatcher(dec,
		apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding"))
	if lw.o.Keep == nil {
		return w, nil
	}
	keep := lw.o.Keep
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if o, ok := e.Object.(*Object); ok && (e.Type == watch.Added || e.Type == watch.Modified || e.Type == watch.Deleted) {
			return e, keep(o.namespace)
		}
		return e, true
	}), nil
}

// WatchDecoder reads watch events from a JSON watch stream. Each frame is
// found by a frameReader; its type and object come from that scan when the
// frame has the apiserver's layout, and New validates the object in the
// pass that reads its metadata and copies it out of the frame (the one
// validating pass over the bytes). A frame of any other layout is
// validated whole with gjson, then read with gjson.
type WatchDecoder struct {
	rc     io.ReadCloser
	frames *frameReader
	opt    BuildOptions
	// onError, when set, is called with each ERROR event's status.
	onError func(*metav1.Status)
	// err is the first error, returned by every later call.
	err error
}

var _ watch.Decoder = (*WatchDecoder)(nil)

// NewWatchDecoder decodes the watch stream rc.
func NewWatchDecoder(rc io.ReadCloser, opt BuildOptions) *WatchDecoder {
	opt.Validate = true
	return &WatchDecoder{rc: rc, frames: newFrameReader(rc), opt: opt}
}

// Decode returns the next event. ERROR events carry a *metav1.Status, so
// the reflector sees the apiserver's error (410 Gone makes it relist);
// BOOKMARK events carry an Object with the resourceVersion and annotations
// the reflector reads (the end of a streamed initial list).
//
// A stream that ends cleanly between frames gives io.EOF, one that ends
// inside a frame io.ErrUnexpectedEOF, and a read error is returned as it
// is: the watch.StreamWatcher tells these apart. Any error is final.
func (d *WatchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	if d.err != nil {
		return "", nil, d.err
	}
	t, o, err := d.decode()
	if err != nil {
		d.err = err
	}
	return t, o, err
}

func (d *WatchDecoder) decode() (watch.EventType, runtime.Object, error) {
	// The frame aliases the reader's buffer, which the next Decode
	// overwrites while this event is still in flight: New copies what it
	// keeps, and the type is one of the package's constants.
	fr, err := d.frames.next()
	if err != nil {
		return "", nil, err
	}
	// The envelope's own bytes are checked by envelope, exactly; the
	// object's by New or, for an ERROR, by encoding/json.
	typ, raw, ok := fr.envelope()
	if !ok {
		if !gjson.Valid(str(fr.b)) {
			return "", nil, ErrInvalid
		}
		var obj gjson.Result
		gjson.Parse(str(fr.b)).ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "type":
				typ = v.Str
			case "object":
				obj = v
			}
			return true
		})
		raw = fr.b[obj.Index : obj.Index+len(obj.Raw)]
	}
	var t watch.EventType
	for _, c := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if typ == string(c) {
			t = c
		}
	}
	switch t {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		if len(raw) == 0 || raw[0] != '{' {
			return "", nil, fmt.Errorf("raw: %s watch event without an object", t)
		}
		o, err := New(raw, d.opt)
		if err != nil {
			return "", nil, err
		}
		return t, o, nil
	case watch.Error:
		st := &metav1.Status{}
		if err := json.Unmarshal(raw, st); err != nil {
			return "", nil, fmt.Errorf("raw: decode watch error: %w", err)
		}
		if d.onError != nil {
			d.onError(st)
		}
		return t, st, nil
	default:
		return "", nil, fmt.Errorf("raw: unknown watch event type %q", strings.Clone(typ))
	}
}

// Close closes the stream.
func (d *WatchDecoder) Close() { _ = d.rc.Close() }
