//go:build openblas

package main

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// Built with -tags openblas (cgo, Debian's libopenblas-dev, and
// CGO_LDFLAGS=-lopenblas), smtd runs every gonum matrix product on
// OpenBLAS instead of gonum's pure-Go BLAS (README, "Faster BLAS"),
// float32 products (soft-KNN) too.
func init() {
	blas64.Use(netlib.Implementation{})
	blas32.Use(netlib.Implementation{})
}
