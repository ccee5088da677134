package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/kafka"
	natssink "github.com/kubewire/kubewire/sinks/nats"
)

// TestFilesListsEveryFileFieldOfTheConfiguration sets, by reflection, every
// string field whose JSON name ends in "File" to its own path, in a block of
// every sink type kubewire ships, so a file field added later without a line
// in its block's Files fails here.
func TestFilesListsEveryFileFieldOfTheConfiguration(t *testing.T) {
	reg := app.DefaultRegistry()
	c := &config.Config{}
	for _, typ := range reg.Types() {
		blk, _ := reg.NewBlock(typ)
		c.Sinks = append(c.Sinks, config.Sink{Type: typ, Block: blk})
	}
	var want []string
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.Type().Elem().Kind() == reflect.Struct {
				v.Set(reflect.New(v.Type().Elem()))
				fill(v.Elem(), path)
			}
		case reflect.Slice:
			for i := range v.Len() {
				fill(v.Index(i), path+"["+string(rune('0'+i))+"]")
			}
		case reflect.Struct:
			for i := range v.NumField() {
				f := v.Type().Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if !f.IsExported() || name == "" || name == "-" {
					continue
				}
				p := name
				if path != "" {
					p = path + "." + name
				}
				if f.Type.Kind() == reflect.String && strings.HasSuffix(name, "File") {
					v.Field(i).SetString("/files/" + p)
					want = append(want, p)
					continue
				}
				fill(v.Field(i), p)
			}
		}
	}
	for i, s := range c.Sinks {
		fill(reflect.ValueOf(s.Block).Elem(), "sinks["+string(rune('0'+i))+"]."+s.Type)
	}
	if len(want) < 10 {
		t.Fatalf("found only %d file fields by reflection: %v", len(want), want)
	}
	var got []string
	for _, f := range c.Files() {
		if f.Path != "/files/"+f.Field.String() {
			t.Errorf("%s holds %q, want the value of that field", f.Field, f.Path)
		}
		got = append(got, f.Field.String())
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Files lists\n  %v\nwant\n  %v", got, want)
	}
}

func TestFilesLeavesOutUnsetFields(t *testing.T) {
	c := &config.Config{Sinks: []config.Sink{
		{Type: kafka.Type, Block: &kafka.Config{TLS: &kafka.TLS{CAFile: "/ca.pem"}}},
		{Type: natssink.Type, Block: &natssink.Config{Auth: &natssink.Auth{TokenEnv: "T"}}},
	}}
	files := c.Files()
	if len(files) != 1 || files[0].Field.String() != "sinks[0].kafka.tls.caFile" || files[0].Path != "/ca.pem" {
		t.Fatalf("Files() = %v, want only sinks[0].kafka.tls.caFile", files)
	}
}
