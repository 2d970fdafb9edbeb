// Package asmgen is the writer the programs that generate smtd's Go
// assembly share (online/fused_gen.go, internal/gemm/gemm_gen.go): they
// unroll the loops in Go and write one instruction per line, so that the
// assembly needs no macros and reads as it runs.
package asmgen

import (
	"bytes"
	"fmt"
)

// File is the text of one assembly file being written.
type File struct{ bytes.Buffer }

// Op writes one instruction, formatted as by fmt.Sprintf.
func (f *File) Op(format string, args ...any) { fmt.Fprintf(f, "\t"+format+"\n", args...) }

// Label writes a label.
func (f *File) Label(l string) { fmt.Fprintf(f, "%s:\n", l) }

// Comment writes a comment line, after an empty line.
func (f *File) Comment(c string) { fmt.Fprintf(f, "\n\t// %s\n", c) }
