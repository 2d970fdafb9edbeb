//go:build ignore

// This program writes gemm_amd64.s, the AVX-512 and AVX2 micro-kernels of
// package gemm (run by go generate). The loops over rows, vector registers
// and the unrolled steps of l are unrolled here, in Go, so that the
// assembly needs no macros; everything else is spelled out as it runs.
//
// Each kernel computes one mr×nr tile of C from a packed micro-panel of
// op(A) (kc steps of mr values) and one of op(B) (kc steps of nr values):
//
//	acc[i][j] = 0
//	for l := 0; l < kc; l++ {
//		acc[i][j] = fma(a[l][i], b[l][j], acc[i][j])   // all i, j
//	}
//	C[i][j] = α·acc[i][j]                 if β = 0 (C is not read)
//	C[i][j] = fma(α, acc[i][j], β·C[i][j]) otherwise
//
// C is row-major, so a vector register holds consecutive columns j of one
// row i: each step loads the nr values of b[l] into nr/w registers (w lanes
// each), broadcasts the mr values of a[l] one at a time and issues one FMA
// per accumulator.
//
// AVX-512 (mr = 12, nr = 16): accumulators Z0–Z23 (row i in Z2i, Z2i+1),
// b[l] in Z24, Z25, the broadcasts of a[l] rotate through Z26–Z31. Per
// step: 2 loads + 12 broadcasts for 24 FMAs.
//
// AVX-512 for the last ≤ 8 columns of C (mr = 12, nr = 8): accumulators
// Z0–Z11, b[l] in Z12, broadcasts in Z13–Z18. Per step: 1 load + 12
// broadcasts for 12 FMAs.
//
// AVX2 (mr = 6, nr = 8): accumulators Y0–Y11 (row i in Y2i, Y2i+1), b[l] in
// Y12, Y13, the broadcasts alternate between Y14 and Y15. Per step: 2 loads
// + 6 broadcasts for 12 FMAs.
//
// Each keeps at least 12 independent FMA chains in flight, more than the
// 2 pipes × 4 cycles of FMA latency of recent x86 cores. Every element is
// one FMA chain over l in order, so all kernels (and the portable one in
// kernel.go, which uses math.FMA) give bitwise identical results.
package main

import (
	"fmt"
	"log"
	"os"

	"github.com/smtd/smtd/internal/asmgen"
)

type asm = asmgen.File

// unroll is the number of steps of l per trip of the main loop.
const unroll = 4

// isa describes one vector extension: its register prefix, lanes per
// register and the micro-tile it computes.
type isa struct {
	name   string
	reg    string // "Z" or "Y"
	lanes  int    // float64 lanes per register
	mr, nr int
	zero   string // the instruction that clears an accumulator
	masked bool   // the kernel takes rows and a column mask (AVX-512)
}

func (s isa) regs() int        { return s.nr / s.lanes }           // registers per row
func (s isa) acc(i, v int) int { return i*s.regs() + v }           // accumulator of row i, register v
func (s isa) bReg(v int) int   { return s.mr*s.regs() + v }        // register v of b[l]
func (s isa) first() int       { return s.mr*s.regs() + s.regs() } // first broadcast register
func (s isa) free() int        { return s.mr * s.regs() }          // first register free to store
func (s isa) r(n int) string   { return fmt.Sprintf("%s%d", s.reg, n) }

// Arguments (ABI0):
//
//	kc int, a, b, c *float64, ldc int, alpha, beta float64, zero int
//
// Registers: SI walks a, DI walks b, CX counts the steps of l left, DX is
// c, R8 is ldc in bytes and R9 walks the rows of C.
func kernel(a *asm, s isa, nbcast int) {
	name := "dgemm" + s.name
	if s.masked {
		fmt.Fprintf(a, "\n// func %s(kc int, a, b, c *float64, ldc int, alpha, beta float64, zero, rows, mask int)\n", name)
		fmt.Fprintf(a, "TEXT ·%s(SB), NOSPLIT, $0-80\n", name)
	} else {
		fmt.Fprintf(a, "\n// func %s(kc int, a, b, c *float64, ldc int, alpha, beta float64, zero int)\n", name)
		fmt.Fprintf(a, "TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	}
	a.Op("MOVQ kc+0(FP), CX")
	a.Op("MOVQ a+8(FP), SI")
	a.Op("MOVQ b+16(FP), DI")
	a.Op("MOVQ c+24(FP), DX")
	a.Op("MOVQ ldc+32(FP), R8")
	a.Op("SHLQ $3, R8")

	a.Comment("fetch the tile of C while the products run")
	a.Op("MOVQ DX, R9")
	rowBytes := 8 * s.nr
	for i := 0; i < s.mr; i++ {
		for off := 0; off < rowBytes; off += 64 {
			a.Op("PREFETCHT0 %d(R9)", off)
		}
		a.Op("PREFETCHT0 %d(R9)", rowBytes-1)
		if i < s.mr-1 {
			a.Op("ADDQ R8, R9")
		}
	}

	a.Comment("acc = 0")
	for i := 0; i < s.mr*s.regs(); i++ {
		a.Op("%s %s, %s, %s", s.zero, s.r(i), s.r(i), s.r(i))
	}

	step := func(u int) {
		for v := 0; v < s.regs(); v++ {
			a.Op("VMOVUPD %d(DI), %s", 8*(u*s.nr+v*s.lanes), s.r(s.bReg(v)))
		}
		for i := 0; i < s.mr; i++ {
			bc := s.r(s.first() + i%nbcast)
			a.Op("VBROADCASTSD %d(SI), %s", 8*(u*s.mr+i), bc)
			for v := 0; v < s.regs(); v++ {
				a.Op("VFMADD231PD %s, %s, %s", s.r(s.bReg(v)), bc, s.r(s.acc(i, v)))
			}
		}
	}

	a.Comment(fmt.Sprintf("%d steps of l per trip while at least %d are left", unroll, unroll))
	a.Op("CMPQ CX, $%d", unroll)
	a.Op("JLT %s_tail", name)
	a.Label(name + "_loop")
	for u := 0; u < unroll; u++ {
		step(u)
	}
	a.Op("ADDQ $%d, SI", 8*unroll*s.mr)
	a.Op("ADDQ $%d, DI", 8*unroll*s.nr)
	a.Op("SUBQ $%d, CX", unroll)
	a.Op("CMPQ CX, $%d", unroll)
	a.Op("JGE %s_loop", name)

	a.Comment("the remaining steps one at a time")
	a.Label(name + "_tail")
	a.Op("TESTQ CX, CX")
	a.Op("JZ %s_store", name)
	a.Label(name + "_one")
	step(0)
	a.Op("ADDQ $%d, SI", 8*s.mr)
	a.Op("ADDQ $%d, DI", 8*s.nr)
	a.Op("DECQ CX")
	a.Op("JNZ %s_one", name)

	a.Label(name + "_store")
	a.Op("VBROADCASTSD alpha+40(FP), %s", s.r(s.free()))
	a.Op("VBROADCASTSD beta+48(FP), %s", s.r(s.free()+1))
	a.Op("MOVQ DX, R9")
	if !s.masked {
		store(a, s, name, false)
		return
	}
	a.Op("MOVQ rows+64(FP), R11")
	a.Op("MOVQ mask+72(FP), AX")
	a.Op("CMPQ R11, $%d", s.mr)
	a.Op("JNE %s_edge", name)
	a.Op("CMPQ AX, $0x%x", 1<<s.nr-1)
	a.Op("JNE %s_edge", name)
	store(a, s, name, false)
	a.Label(name + "_edge")
	a.Op("KMOVW AX, K1")
	a.Op("KSHIFTRW $8, K1, K2")
	store(a, s, name+"_edge", true)
}

// store emits the two ways to add the accumulators to C (β ≠ 0, β = 0),
// on whole rows or, masked, on the first rows (R11) and the columns of
// the masks K1 and K2 (one per register of a row).
func store(a *asm, s isa, name string, masked bool) {
	alpha, beta, tmp := s.r(s.free()), s.r(s.free()+1), s.r(s.free()+2)
	mask := func(v int) string {
		if !masked {
			return ""
		}
		return fmt.Sprintf("K%d, ", v+1)
	}
	nextRow := func(i int) {
		if i == s.mr-1 {
			return
		}
		if masked {
			a.Op("CMPQ R11, $%d", i+1)
			a.Op("JLE %s_done", name)
		}
		a.Op("ADDQ R8, R9")
	}
	a.Op("CMPQ zero+56(FP), $0")
	a.Op("JNE %s_overwrite", name)

	a.Comment("C = fma(α, acc, β·C)")
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.regs(); v++ {
			off := 8 * v * s.lanes
			if masked {
				a.Op("VMULPD.Z %d(R9), %s, %s%s", off, beta, mask(v), tmp)
			} else {
				a.Op("VMULPD %d(R9), %s, %s", off, beta, tmp)
			}
			a.Op("VFMADD231PD %s, %s, %s", alpha, s.r(s.acc(i, v)), tmp)
			a.Op("VMOVUPD %s, %s%d(R9)", tmp, mask(v), off)
		}
		nextRow(i)
	}
	a.Op("VZEROUPPER")
	a.Op("RET")

	a.Comment("β = 0: C = α·acc, C is not read")
	a.Label(name + "_overwrite")
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.regs(); v++ {
			acc := s.r(s.acc(i, v))
			a.Op("VMULPD %s, %s, %s", alpha, acc, acc)
			a.Op("VMOVUPD %s, %s%d(R9)", acc, mask(v), 8*v*s.lanes)
		}
		nextRow(i)
	}
	if masked {
		a.Label(name + "_done")
	}
	a.Op("VZEROUPPER")
	a.Op("RET")
}

// copyRows emits copy<w>AVX512, which packs a micro-panel of w = 12 or 16
// values per step from rows of a row-major matrix,
//
//	dst[l·w + j] = src[l·ld + j],    j < w, l < depth,
//
// one step (one or two registers) at a time. SI walks src, DI dst, R8 is
// ld in bytes and CX counts the steps left.
func copyRows(a *asm, w int) {
	name := fmt.Sprintf("copy%dAVX512", w)
	fmt.Fprintf(a, "\n// func %s(dst, src *float64, ld, depth int)\n", name)
	fmt.Fprintf(a, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
	a.Op("MOVQ dst+0(FP), DI")
	a.Op("MOVQ src+8(FP), SI")
	a.Op("MOVQ ld+16(FP), R8")
	a.Op("SHLQ $3, R8")
	a.Op("MOVQ depth+24(FP), CX")
	a.Label(name + "_step")
	second := "Z1"
	if w == 12 {
		second = "Y1"
	}
	a.Op("VMOVUPD (SI), Z0")
	a.Op("VMOVUPD 64(SI), %s", second)
	a.Op("VMOVUPD Z0, (DI)")
	a.Op("VMOVUPD %s, 64(DI)", second)
	a.Op("ADDQ R8, SI")
	a.Op("ADDQ $%d, DI", 8*w)
	a.Op("DECQ CX")
	a.Op("JNZ %s_step", name)
	a.Op("VZEROUPPER")
	a.Op("RET")
}

func main() {
	var a asm
	a.WriteString(`// Code generated by gemm_gen.go; DO NOT EDIT.

//go:build !purego

#include "textflag.h"
`)
	kernel(&a, isa{name: "AVX512", reg: "Z", lanes: 8, mr: 12, nr: 16, zero: "VPXORQ", masked: true}, 6)
	kernel(&a, isa{name: "AVX512x8", reg: "Z", lanes: 8, mr: 12, nr: 8, zero: "VPXORQ", masked: true}, 6)
	kernel(&a, isa{name: "AVX2", reg: "Y", lanes: 4, mr: 6, nr: 8, zero: "VXORPD"}, 2)
	transpose(&a, 12)
	transpose(&a, 16)
	copyRows(&a, 12)
	copyRows(&a, 16)
	if err := os.WriteFile("gemm_amd64.s", a.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// transpose emits transpose<w>AVX512, which packs w rows (w = 8q or
// 8q + 4) of a row-major matrix into a micro-panel,
//
//	dst[l·w + i] = src[i·ld + l],    i < w, l < 8·blocks,
//
// eight columns at a time: each group of 8 rows is loaded as 8 registers
// and transposed in three rounds of shuffles (pairs of rows, then 128-bit
// lanes of 4 rows, then of 8 rows); a last group of 4 rows is transposed
// with unpacks and 128-bit permutes of 256-bit halves.
//
// Registers: SI walks the columns of src, R10 its rows, DI walks dst, R8
// is ld in bytes and CX counts the blocks left.
func transpose(a *asm, w int) {
	name := fmt.Sprintf("transpose%dAVX512", w)
	fmt.Fprintf(a, "\n// func %s(dst, src *float64, ld, blocks int)\n", name)
	fmt.Fprintf(a, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
	a.Op("MOVQ dst+0(FP), DI")
	a.Op("MOVQ src+8(FP), SI")
	a.Op("MOVQ ld+16(FP), R8")
	a.Op("SHLQ $3, R8")
	a.Op("MOVQ blocks+24(FP), CX")
	a.Label(name + "_block")
	a.Op("MOVQ SI, R10")
	shuf := func(imm string, x, y, dst int) {
		a.Op("VSHUFF64X2 $%s, Z%d, Z%d, Z%d", imm, y, x, dst) // dst = x.L?, x.L?, y.L?, y.L?
	}
	for g := 0; g < w/8; g++ {
		a.Comment(fmt.Sprintf("rows %d to %d", 8*g, 8*g+7))
		for r := 0; r < 8; r++ {
			a.Op("VMOVUPD (R10), Z%d", r)
			a.Op("ADDQ R8, R10")
		}
		for p := 0; p < 4; p++ {
			a.Op("VUNPCKLPD Z%d, Z%d, Z%d", 2*p+1, 2*p, 8+2*p)
			a.Op("VUNPCKHPD Z%d, Z%d, Z%d", 2*p+1, 2*p, 9+2*p)
		}
		// Z8+o+2q holds rows 2q, 2q+1 of the columns of parity o in its
		// lanes; then 4 rows of columns {o, o+4} and {o+2, o+6}.
		for o := 0; o < 2; o++ {
			shuf("0x88", 8+o, 10+o, 16+4*o)
			shuf("0xDD", 8+o, 10+o, 17+4*o)
			shuf("0x88", 12+o, 14+o, 18+4*o)
			shuf("0xDD", 12+o, 14+o, 19+4*o)
		}
		for o := 0; o < 2; o++ {
			for h := 0; h < 2; h++ {
				c := o + 2*h // column of the low lanes
				shuf("0x88", 16+4*o+h, 18+4*o+h, 24+c)
				shuf("0xDD", 16+4*o+h, 18+4*o+h, 24+c+4)
			}
		}
		for c := 0; c < 8; c++ {
			a.Op("VMOVUPD Z%d, %d(DI)", 24+c, 8*(c*w+8*g))
		}
	}
	if w%8 == 4 {
		g := w / 8
		a.Comment(fmt.Sprintf("rows %d to %d", 8*g, 8*g+3))
		for r := 0; r < 4; r++ {
			a.Op("VMOVUPD (R10), Z%d", r)
			if r < 3 {
				a.Op("ADDQ R8, R10")
			}
		}
		for p := 0; p < 2; p++ {
			a.Op("VUNPCKLPD Z%d, Z%d, Z%d", 2*p+1, 2*p, 8+2*p)
			a.Op("VUNPCKHPD Z%d, Z%d, Z%d", 2*p+1, 2*p, 9+2*p)
		}
		for t := 0; t < 4; t++ {
			a.Op("VEXTRACTF64X4 $1, Z%d, Y%d", 8+t, 12+t)
		}
		// Y8+o (Y12+o for the high half) holds rows 0, 1 of columns of
		// parity o, Y10+o (Y14+o) rows 2, 3.
		for o := 0; o < 2; o++ {
			for half := 0; half < 2; half++ {
				lo, hi := 8+o+4*half, 10+o+4*half
				c := o + 4*half
				a.Op("VPERM2F128 $0x20, Y%d, Y%d, Y%d", hi, lo, c)
				a.Op("VPERM2F128 $0x31, Y%d, Y%d, Y%d", hi, lo, c+2)
			}
		}
		for c := 0; c < 8; c++ {
			a.Op("VMOVUPD Y%d, %d(DI)", c, 8*(c*w+8*g))
		}
	}
	a.Op("ADDQ $64, SI")
	a.Op("ADDQ $%d, DI", 8*8*w)
	a.Op("DECQ CX")
	a.Op("JNZ %s_block", name)
	a.Op("VZEROUPPER")
	a.Op("RET")
}
