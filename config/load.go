package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a configuration file.
type Error struct {
	File  string // the file, or "<default>" for the built-in config
	Line  int    // 1-based; 0 when the field is absent from the file
	Field string // the field's path, e.g. pipelines[0].kmeans.atoms
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Load reads, decodes, completes with defaults and validates the file at
// path. Every problem is reported at once as Errors.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse is Load for a file already in memory; file names it in errors.
//
// Decoding is strict: an unknown key or a value of the wrong type is an
// error. A field absent from the file takes its documented default (the
// defaults of a pipeline depend on its modality); a field present in the
// file is validated as written, so "atoms: 0" is refused rather than
// replaced by the default.
func Parse(data []byte, file string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, Errors{{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	present := map[string]int{}
	var errs Errors
	if len(root.Content) > 0 {
		errs = walk(file, root.Content[0], reflect.TypeFor[Config](), "", present)
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, append(errs, &Error{File: file, Msg: err.Error()})
		}
		// walk reported the unknown keys and the values of the wrong
		// type, each with its field; the decoder's messages for lines
		// it did not are kept as they are.
		reported := map[int]bool{}
		for _, e := range errs {
			reported[e.Line] = true
		}
		for _, msg := range te.Errors {
			line := lineOf(msg)
			if !reported[line] {
				errs = append(errs, &Error{File: file, Line: line, Msg: strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", line))})
			}
		}
	}
	// The values that decoded are validated even when others did not, so
	// that every problem is reported at once. A field that failed to
	// decode takes its default, as if absent, so that the checks of other
	// fields against it hold; its own complaint is left out. A sequence
	// element that failed as a whole is dropped by the decoder, which
	// shifts the elements after it: then the checks would name the wrong
	// ones, and only the decoding errors are reported.
	bad := map[string]bool{}
	for _, e := range errs {
		bad[e.Field] = true
		delete(present, e.Field)
	}
	if !slices.ContainsFunc(errs, func(e *Error) bool { return strings.HasSuffix(e.Field, "]") }) {
		applyDefaults(&cfg, present)
		for _, e := range cfg.validate(file, present) {
			if !bad[e.Field] {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		// In file order; the problems of fields absent from the file last.
		slices.SortStableFunc(errs, func(a, b *Error) int { return cmp.Compare(fileOrder(a), fileOrder(b)) })
		return nil, errs
	}
	return &cfg, nil
}

// fileOrder is the line of e, or for an absent field past every line.
func fileOrder(e *Error) int {
	if e.Line == 0 {
		return math.MaxInt
	}
	return e.Line
}

// lineOf returns N of a message "line N: …" of the YAML decoder, or 0.
func lineOf(msg string) int {
	var line int
	fmt.Sscanf(msg, "line %d:", &line)
	return line
}

// walk records the line of every field present in the file under its path
// and reports keys that name no field of t and values that do not decode
// into their field's type.
func walk(file string, n *yaml.Node, t reflect.Type, path string, present map[string]int) Errors {
	var errs Errors
	switch {
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			f, ok := fieldByTag(t, key.Value)
			p := join(path, key.Value)
			if !ok {
				errs = append(errs, &Error{File: file, Line: key.Line, Field: p, Msg: "unknown field"})
				continue
			}
			present[p] = key.Line
			errs = append(errs, walk(file, val, f.Type, p, present)...)
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, el := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			present[p] = el.Line
			errs = append(errs, walk(file, el, t.Elem(), p, present)...)
		}
	default:
		var te *yaml.TypeError
		if err := n.Decode(reflect.New(t).Interface()); errors.As(err, &te) {
			for _, msg := range te.Errors {
				line := cmp.Or(lineOf(msg), n.Line)
				errs = append(errs, &Error{File: file, Line: line, Field: path, Msg: strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", line))})
			}
		}
	}
	return errs
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// applyDefaults fills every field absent from the file with its default.
//
// A file without pipelines gets the default pipelines as they are: they
// are complete, and filling them again as if read from the file would
// take each one's absent modality for image and give all three the image
// subjects.
func applyDefaults(cfg *Config, present map[string]int) {
	def := Default()
	fill(reflect.ValueOf(cfg).Elem(), reflect.ValueOf(def).Elem(), "", present)
	if _, ok := present["pipelines"]; !ok {
		cfg.Pipelines = def.Pipelines
		return
	}
	for i := range cfg.Pipelines {
		p := &cfg.Pipelines[i]
		path := fmt.Sprintf("pipelines[%d]", i)
		if _, ok := present[path+".modality"]; !ok {
			p.Modality = Image
		}
		d := DefaultPipeline(p.Modality, p.Name)
		fill(reflect.ValueOf(p).Elem(), reflect.ValueOf(&d).Elem(), path, present)
	}
}

// fill copies each leaf of def into v unless the file set it. Slices are
// left alone: pipelines are filled one by one with their modality's
// defaults.
func fill(v, def reflect.Value, path string, present map[string]int) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		p := join(path, yamlName(f))
		switch f.Type.Kind() {
		case reflect.Struct:
			fill(v.Field(i), def.Field(i), p, present)
		case reflect.Slice:
		default:
			if _, ok := present[p]; !ok {
				v.Field(i).Set(def.Field(i))
			}
		}
	}
}

// LiveChanges compares two valid configurations. It returns the paths of
// the fields that differ and may change while the daemon runs (tagged
// live), and of those that differ and may not.
func LiveChanges(old, new *Config) (live, refused []string) {
	if len(old.Pipelines) != len(new.Pipelines) {
		refused = append(refused, "pipelines")
	}
	if len(old.NATS.Users) != len(new.NATS.Users) {
		refused = append(refused, "nats.users")
	}
	diff(reflect.ValueOf(old).Elem(), reflect.ValueOf(new).Elem(), "", &live, &refused)
	// Lists of strings are compared whole; none is live.
	if !slices.Equal(old.Cluster.Labels, new.Cluster.Labels) {
		refused = append(refused, "cluster.labels")
	}
	for i := range min(len(old.Pipelines), len(new.Pipelines)) {
		if !slices.Equal(old.Pipelines[i].Placement, new.Pipelines[i].Placement) {
			refused = append(refused, fmt.Sprintf("pipelines[%d].placement", i))
		}
	}
	// kmeans.code is live for the codes published, but the layout of the
	// SMT statistics depends on it (f_gq codes need a full V).
	for i := range min(len(old.Pipelines), len(new.Pipelines)) {
		field := fmt.Sprintf("pipelines[%d].kmeans.code", i)
		if new.Pipelines[i].SMT.Dim > 0 && slices.Contains(live, field) {
			live = slices.DeleteFunc(live, func(f string) bool { return f == field })
			refused = append(refused, field+" (with smt.dim > 0)")
		}
	}
	return live, refused
}

func diff(a, b reflect.Value, path string, live, refused *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			p := join(path, yamlName(f))
			if f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Slice {
				diff(a.Field(i), b.Field(i), p, live, refused)
				continue
			}
			if a.Field(i).Equal(b.Field(i)) {
				continue
			}
			if f.Tag.Get("live") == "true" {
				*live = append(*live, p)
			} else {
				*refused = append(*refused, p)
			}
		}
	case reflect.Slice:
		for i := range min(a.Len(), b.Len()) {
			diff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), live, refused)
		}
	}
}
