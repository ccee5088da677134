// Package perf holds kubewire's end-to-end benchmarks: the whole pipeline
// (informer, listener, dispatcher, encoding, sink) fed by a replayed watch
// stream, and, behind the "bench" build tag, the harnesses that run against a
// real kube-apiserver. It has no code of its own outside tests; the results
// and how to reproduce them are in docs/benchmarks.md.
package perf
