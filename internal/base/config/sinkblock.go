package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	strictjson "sigs.k8s.io/json"
)

// SinkBlock is the type-specific block of a sink (the kafka block of a sink
// of type kafka, say). Its Go type lives in the sink's own package, which
// alone knows its fields, defaults and rules; config decodes the block into
// it strictly, with the same type checks and field paths as the rest of the
// file.
//
// A zero value, or a block decoded from the file, means "every field at its
// default"; Default fills those in and must be idempotent. Validate checks a
// block as decoded from the file (before Default), so that it can tell an
// omitted field from a given one where it needs to; it reports every problem
// under p (sinks[i].<type>). routes are the resources that send their events
// to the sink, for rules that depend on them (a topic template that must
// expand to a legal name for each).
//
// Optional capabilities, found by type assertion:
//   - BlockRequired() string: the block may not be omitted; the string says
//     what it must hold at least.
//   - ExplicitZeros(p, given) field.ErrorList: refuses a 0 written in the
//     file for a field whose 0 means the default.
//   - Warnings(p) []string: valid but risky settings (see Config.Warnings).
//   - Files(p) []FileRef: files the sink reads (see Config.Files).
type SinkBlock interface {
	Default()
	Validate(p *field.Path, routes []Route) field.ErrorList
}

// SinkTypes is what loading needs to know about sink types: which exist, and
// a new block for each. The sink registry (package sinks) implements it.
type SinkTypes interface {
	// Types lists the sink types, sorted.
	Types() []string
	// NewBlock returns a new, zero block of type typ, or false if there is
	// no such type.
	NewBlock(typ string) (SinkBlock, bool)
}

// Route is a resource that sends its events to a sink.
type Route struct {
	// Path is the resource's path, resources[i].
	Path *field.Path
	// Sink is the name of the sink routed to.
	Sink string
	// Cluster is the configured cluster name.
	Cluster string
	// Resource is the resource's configuration.
	Resource *Resource
}

// GVR returns the routed resource's group, version and resource.
func (r Route) GVR() schema.GroupVersionResource { return r.Resource.GVR() }

// Routes lists the resources that send their events to the sink called name.
func (c *Config) Routes(name string) []Route {
	var rs []Route
	for j := range c.Resources {
		r := &c.Resources[j]
		if name != "" && slices.Contains(r.Sinks, name) {
			rs = append(rs, Route{Path: field.NewPath("resources").Index(j), Sink: name, Cluster: c.Cluster, Resource: r})
		}
	}
	return rs
}

// sinkFields are the fields every sink has; any other key of a sink is a
// type-specific block.
var sinkFields = []string{"name", "type", "overflow", "spool"}

// takeSinkBlocks removes the type-specific blocks from the sinks of a
// generic decoding of the file and returns them per sink index, so that the
// typed decoding sees only the common fields and each block can be decoded
// into its own type.
func takeSinkBlocks(tree any) map[int]map[string]any {
	root, _ := tree.(map[string]any)
	list, _ := root["sinks"].([]any)
	out := map[int]map[string]any{}
	for i, s := range list {
		m, ok := s.(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			if slices.Contains(sinkFields, k) {
				continue
			}
			if out[i] == nil {
				out[i] = map[string]any{}
			}
			out[i][k] = v
			delete(m, k)
		}
	}
	return out
}

// decodeSinkBlocks decodes each sink's block into a new block of its type.
// It reports blocks of another type, blocks of no known type (as unknown
// fields) and an omitted block that its type requires.
func decodeSinkBlocks(cfg *Config, raw map[int]map[string]any, types SinkTypes, tc *typeChecker) field.ErrorList {
	var errs field.ErrorList
	known := types.Types()
	for i := range cfg.Sinks {
		s := &cfg.Sinks[i]
		sp := field.NewPath("sinks").Index(i)
		keys := make([]string, 0, len(raw[i]))
		for k := range raw[i] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			switch {
			case !slices.Contains(known, k):
				errs = append(errs, &field.Error{Type: field.ErrorTypeForbidden, Field: sp.Child(k).String(), BadValue: "", Detail: "unknown field"})
			case k != s.Type && s.Type != "":
				errs = append(errs, field.Forbidden(sp.Child(k),
					fmt.Sprintf("may only be set when type is %q (type is %q)", k, s.Type)))
			}
		}
		blk, ok := types.NewBlock(s.Type)
		if !ok {
			continue // the type is reported by validateSinks
		}
		s.Block = blk
		bp := sp.Child(s.Type)
		v, given := raw[i][s.Type]
		if !given || v == nil {
			if r, ok := blk.(interface{ BlockRequired() string }); ok {
				errs = append(errs, field.Required(bp, r.BlockRequired()))
				s.blockMissing = true
			}
			continue
		}
		if !tc.check(v, reflect.TypeOf(blk), bp) {
			continue
		}
		tc.given[bp.String()] = true
		j, err := json.Marshal(v)
		if err != nil {
			errs = append(errs, fileError("internal error: "+err.Error()))
			continue
		}
		strictErrs, err := strictjson.UnmarshalStrict(j, blk)
		if err != nil {
			errs = append(errs, field.Invalid(bp, field.OmitValueType{}, "cannot decode the block: "+err.Error()))
			continue
		}
		for _, se := range strictErrs {
			fe := strictFieldError(se)
			fe.Field = bp.String() + "." + fe.Field
			errs = append(errs, fe)
		}
	}
	return errs
}

// validateSinkBlock checks the block of a sink whose type is known.
func validateSinkBlock(c *Config, i int, given map[string]bool) field.ErrorList {
	s := &c.Sinks[i]
	if s.Block == nil || s.blockMissing {
		return nil
	}
	bp := field.NewPath("sinks").Index(i).Child(s.Type)
	errs := s.Block.Validate(bp, c.Routes(s.Name))
	if z, ok := s.Block.(interface {
		ExplicitZeros(*field.Path, func(*field.Path) bool) field.ErrorList
	}); ok && given != nil {
		errs = append(errs, z.ExplicitZeros(bp, func(p *field.Path) bool { return given[p.String()] })...)
	}
	return errs
}

// MarshalJSON writes the sink as the file holds it: the common fields and
// the block under its type's name.
func (s Sink) MarshalJSON() ([]byte, error) {
	m := map[string]any{"name": s.Name, "type": s.Type, "spool": s.Spool}
	if s.Overflow != "" {
		m["overflow"] = s.Overflow
	}
	if s.Block != nil && s.Type != "" {
		m[s.Type] = s.Block
	}
	return json.Marshal(m)
}
