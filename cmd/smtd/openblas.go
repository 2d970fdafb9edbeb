//go:build openblas

package main

import (
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// Built with -tags openblas (cgo, Debian's libopenblas-dev, and
// CGO_LDFLAGS=-lopenblas), smtd runs every gonum matrix product on
// OpenBLAS instead of gonum's pure-Go BLAS: see README, "Faster BLAS".
func init() { blas64.Use(netlib.Implementation{}) }
