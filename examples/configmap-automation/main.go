// Command configmap-automation runs client-go informer code against a
// kubewire JetStream stream instead of the API server: an informer fed by
// the stream, whose handler reacts to ConfigMap changes (here, it logs which
// data keys changed). Any number of such processes add no watch to the API
// server.
//
//	go run ./examples/configmap-automation --nats nats://localhost:4222 --stream KUBEWIRE --state cm.state
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	stream := flag.String("stream", "KUBEWIRE", "the JetStream stream kubewire's NATS sink writes to")
	state := flag.String("state", "configmap-automation.state", "the file the View's state is kept in, to restart where it stopped (empty: read the stream from its first message each time)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	if err := run(ctx, *url, *stream, *state, log, nil); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

// run feeds an informer of ConfigMaps from the stream and logs their
// changes until ctx ends. synced, if set, is called once the informer holds
// what the stream held when run started.
func run(ctx context.Context, url, stream, state string, log *slog.Logger, synced func()) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	// The View holds the ConfigMaps, so that the informer starts with every
	// object, as a List on the API server would. It starts from the state
	// the last run saved, and an ordered consumer reads on from the state's
	// position: the stream need not keep what the state already holds.
	// Without a state, it reads the stream from its first message.
	v := consumer.NewView(consumer.Options{Resource: "configmaps"})
	if state != "" {
		if err := v.LoadStateFile(state); err != nil {
			return err
		}
	}
	src, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: stream, Start: v.Position()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcErr := make(chan error, 1)
	go func() { srcErr <- src.Run(ctx); cancel() }()
	if state != "" {
		// An ordered consumer acks nothing, so the state can be saved at
		// any time: every few seconds, and when run returns. A crash
		// reads again what came after the last save; the View drops what
		// it already holds.
		saved := make(chan error, 1)
		go func() { saved <- keepSaving(ctx, v, state, 5*time.Second) }()
		defer func() {
			cancel()
			if err := <-saved; err != nil {
				log.Error("saving the state failed", "file", state, "err", err)
			}
		}()
	}

	inf := consumer.NewSharedIndexInformer(v, "configmaps", 0, nil)
	// Handlers must not block: they log and return. A real controller
	// would put the key on a workqueue here.
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				cm := obj.(*unstructured.Unstructured)
				log.Info("configmap added", "key", key(cm), "keys", dataKeys(cm))
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, cm := oldObj.(*unstructured.Unstructured), newObj.(*unstructured.Unstructured)
			if changed := changedKeys(old, cm); len(changed) > 0 {
				log.Info("configmap changed", "key", key(cm), "changed", changed, "resourceVersion", cm.GetResourceVersion())
			}
		},
		DeleteFunc: func(obj any) {
			// A delete noticed by a relist (or a snapshot) carries the
			// last state known.
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			log.Info("configmap deleted", "key", key(obj.(*unstructured.Unstructured)))
		},
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.Join(ctx.Err(), <-srcErr)
	}
	log.Info("informer synced", "configmaps", len(inf.GetStore().ListKeys()))
	if synced != nil {
		synced()
	}
	<-ctx.Done()
	return <-srcErr
}

// keepSaving saves the View's state every interval until ctx ends, and once
// more then.
func keepSaving(ctx context.Context, v *consumer.View, path string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := v.SaveStateFile(path); err != nil {
				return err
			}
		case <-ctx.Done():
			return v.SaveStateFile(path)
		}
	}
}

func key(cm *unstructured.Unstructured) string {
	return cm.GetNamespace() + "/" + cm.GetName()
}

func data(cm *unstructured.Unstructured) map[string]string {
	d, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	return d
}

func dataKeys(cm *unstructured.Unstructured) []string {
	return slices.Sorted(maps.Keys(data(cm)))
}

// changedKeys lists the data keys added, removed or changed.
func changedKeys(old, cm *unstructured.Unstructured) []string {
	o, n := data(old), data(cm)
	var out []string
	for k, v := range n {
		if ov, ok := o[k]; !ok || ov != v {
			out = append(out, k)
		}
	}
	for k := range o {
		if _, ok := n[k]; !ok {
			out = append(out, fmt.Sprintf("-%s", k))
		}
	}
	slices.Sort(out)
	return out
}
