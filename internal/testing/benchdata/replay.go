package benchdata

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
)

// Replay is a kube-apiserver that serves one resource from memory: a LIST,
// and WATCH streams that carry the initial objects (WatchList,
// sendInitialEvents=true, as client-go 1.35+ asks for by default) followed by
// a recorded stream of MODIFIED events. The bytes on the wire are what the
// apiserver sends, so the client under test pays for HTTP framing and JSON
// decoding exactly as in production; only etcd and the apiserver's own CPU
// are missing.
//
// The live stream is paced by credit, not by time: at most Window events are
// written beyond what the consumer has acknowledged (Ack). That keeps the
// pipeline saturated without overflowing kubewire's buffer, which would fold
// changes together and make the event count meaningless.
type Replay struct {
	kind    Kind
	objects int
	window  int64
	baseRV  int64

	initial [][]byte
	// frames[i] is the MODIFIED event of object i cut at every place the
	// event's sequence number goes: its resourceVersion, and an annotation
	// that makes each event a real change of content. kubewire suppresses
	// updates that change nothing but the resourceVersion, and a stream of
	// those would measure the suppression, not the pipeline.
	frames [][][]byte

	srv *httptest.Server

	mu      sync.Mutex
	cond    *sync.Cond
	allowed int64 // events Play has released
	sent    int64
	acked   int64
	closed  bool
}

const rvPlaceholder = "987654321987654321"

// SeqAnnotation carries the sequence number of a replayed live event, which
// is also its resourceVersion.
const SeqAnnotation = "bench.kubewire.io/seq"

// NewReplay serves objects objects of kind k, generated with seed, and a live
// stream that cycles through them. window bounds the unacknowledged events.
func NewReplay(k Kind, seed uint64, objects, window int) *Replay {
	r := &Replay{kind: k, objects: objects, window: int64(window), baseRV: 1000}
	for i := range objects {
		r.initial = append(r.initial, k.JSON(seed, i, r.baseRV))
		o := k.New(seed, i)
		m := o["metadata"].(map[string]any)
		m["resourceVersion"] = rvPlaceholder
		ann, _ := m["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			m["annotations"] = ann
		}
		ann[SeqAnnotation] = rvPlaceholder
		b := append(append([]byte(`{"type":"MODIFIED","object":`), Marshal(o)...), "}\n"...)
		r.frames = append(r.frames, bytes.Split(b, []byte(rvPlaceholder)))
	}
	r.cond = sync.NewCond(&r.mu)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// URL is the server's base URL, for rest.Config.Host.
func (r *Replay) URL() string { return r.srv.URL }

// InitialBytes is the JSON size of the initial objects, summed.
func (r *Replay) InitialBytes() int {
	n := 0
	for _, b := range r.initial {
		n += len(b)
	}
	return n
}

// FrameBytes is the mean size of one live watch event on the wire.
func (r *Replay) FrameBytes() int {
	n := 0
	for _, f := range r.frames {
		for _, part := range f {
			n += len(part) + 4
		}
	}
	return n / len(r.frames)
}

// Play releases n more live events.
func (r *Replay) Play(n int) {
	r.mu.Lock()
	r.allowed += int64(n)
	r.mu.Unlock()
	r.cond.Broadcast()
}

// Ack returns credit for n live events that reached the end of the pipeline.
func (r *Replay) Ack(n int) {
	r.mu.Lock()
	r.acked += int64(n)
	r.mu.Unlock()
	r.cond.Broadcast()
}

// Close ends every stream and stops the server.
func (r *Replay) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cond.Broadcast()
	r.srv.CloseClientConnections()
	r.srv.Close()
}

func (r *Replay) listPath() string {
	if r.kind.GVR.Group == "" {
		return "/api/" + r.kind.GVR.Version + "/" + r.kind.GVR.Resource
	}
	return "/apis/" + r.kind.GVR.Group + "/" + r.kind.GVR.Version + "/" + r.kind.GVR.Resource
}

func (r *Replay) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != r.listPath() || req.Method != http.MethodGet {
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
		return
	}
	q := req.URL.Query()
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		r.list(w)
		return
	}
	w.WriteHeader(http.StatusOK)
	if q.Get("sendInitialEvents") == "true" {
		for _, b := range r.initial {
			w.Write([]byte(`{"type":"ADDED","object":`))
			w.Write(b)
			w.Write([]byte("}\n"))
		}
		w.Write([]byte(`{"type":"BOOKMARK","object":{"kind":"` + r.kind.Kind + `","apiVersion":"` + r.kind.APIVersion() +
			`","metadata":{"resourceVersion":"` + strconv.FormatInt(r.baseRV, 10) + `","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n"))
	}
	r.stream(w, req)
}

func (r *Replay) list(w http.ResponseWriter) {
	var b bytes.Buffer
	b.WriteString(`{"kind":"` + r.kind.Kind + `List","apiVersion":"` + r.kind.APIVersion() +
		`","metadata":{"resourceVersion":"` + strconv.FormatInt(r.baseRV, 10) + `"},"items":[`)
	for i, o := range r.initial {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(o)
	}
	b.WriteString("]}")
	w.Write(b.Bytes())
}

// stream writes live events as credit allows, flushing whenever it has to
// wait so nothing sits in a buffer while the consumer starves.
func (r *Replay) stream(w http.ResponseWriter, req *http.Request) {
	fl, _ := w.(http.Flusher)
	ctx := req.Context()
	// Taking the lock before broadcasting means the wake-up cannot fall
	// between a waiter's check of ctx and its Wait.
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.cond.Broadcast()
	})
	defer stop()
	var rv []byte
	for {
		r.mu.Lock()
		for !r.closed && ctx.Err() == nil && (r.sent >= r.allowed || r.sent-r.acked >= r.window) {
			r.mu.Unlock()
			if fl != nil {
				fl.Flush()
			}
			r.mu.Lock()
			if !r.closed && ctx.Err() == nil && (r.sent >= r.allowed || r.sent-r.acked >= r.window) {
				r.cond.Wait()
			}
		}
		if r.closed || ctx.Err() != nil {
			r.mu.Unlock()
			return
		}
		i := r.sent
		r.sent++
		r.mu.Unlock()
		f := r.frames[i%int64(len(r.frames))]
		rv = strconv.AppendInt(rv[:0], r.baseRV+1+i, 10)
		for j, part := range f {
			if j > 0 {
				w.Write(rv)
			}
			if _, err := w.Write(part); err != nil {
				return
			}
		}
	}
}
