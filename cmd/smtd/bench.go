package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/smtd/smtd/bench"
)

// benchmarks are the measurements behind BENCHMARKS.md.
var benchmarks = map[string]struct {
	run  func(ctx context.Context, w io.Writer, args []string) error
	help string
}{
	"admm-synthetic": {bench.ADMMSynthetic, "ADMM dictionary learning on a synthetic sparse dictionary: R², atom recovery, convergence of the three schedules"},
	"admm-mnist":     {bench.ADMMMNIST, "ADMM dictionary learning on MNIST digits 0,3,4,6,7: R² after 8000 iterations, atoms as a PNG grid"},
	"admm-moons":     {bench.ADMMMoons, "ADMM on the simplex (R₂) on half moons: histogram of ‖z‖₀, reconstruction error"},
	"admm-patches":   {bench.ADMMPatches, "ADMM dictionary learning on 16x16 natural image patches: R², atoms as a PNG grid"},
	"strip":          {bench.Strip, "non-redundant vs plain Laplacian eigenmaps on a 2-D strip and a Swiss roll: redundancy of the 2nd coordinate, correlation with the short axis"},
	"lem-mnist":      {bench.LEMMNIST, "plain vs non-redundant Laplacian eigenmaps of 15,000 MNIST digits: KNN error with 3-11 coordinates, run time"},
	"cluster":        {bench.Cluster, "worker mode: images/s learned by 1, 2, 3 worker processes (GOMAXPROCS=1 each) of one owner; CPU and NATS bytes of owner and workers per 1000 images, and their CPU when idle; workers one owner can feed, also by its CPU beyond idle and, with -load, by the images/s it merges at saturation from replayed contributions; -accuracy: quick MNIST top-1 of one daemon vs 2 and 3 workers"},
	"disc":           {bench.Disc, "temporal SMT on the unit disc (sparse-manifold-transform section 2): landmark coordinates and Zernike polynomials in the embedding rows"},
	"video":          {bench.Video, "temporal SMT on natural video panned over photos: straightening ratio on held-out clips vs sparse codes and PCA"},
	"kmeans":         {bench.KMeans, "online spherical k-means: learning and assignment patches/s on whitened 6x6 MNIST patches, next to gonum dgemm GFLOP/s"},
	"mnist":          {bench.MNIST, "SMT on MNIST streamed through the daemon: soft-KNN top-1 of its embeddings (over several seeds with -seeds), time and throughput per stage"},
	"moons":          {bench.Moons, "kernel similarity matching on half moons: normalised kernel error for n = 2..64 next to KPCA and Nyström"},
	"ksm-mnist":      {bench.KSMMNIST, "kernel similarity matching on 20x20 MNIST: linear-classifier accuracy on the responses vs raw pixels, sparsity, receptive fields"},
	"memory":         {bench.Memory, "resident memory at 10% and 100% of a long MNIST replay through the daemon (default one million patches)"},
	"faults":         {bench.Faults, "delivery under faults, with the daemon as child processes: kill -9, NATS restart, input stream deleted, full disk, corrupt checkpoint; messages in, applied, applied twice, lost, outputs and duplicates"},
	"takeover":       {bench.Takeover, "cluster mode: a 3-node NATS cluster and three daemon processes; SIGKILL of the owner: seconds to the new owner's first batch, embed requests failed and their latency during the takeover, memory and CPU of owner and standby"},
	"throughput":     {bench.Throughput, "images/s and frames/s learned (and published) by the library vs the daemon (overhead), embed latency p50/p99 at 500 queries/s while learning, answers and busy replies at 5000/s"},
	"words":          {bench.Words, "SMT word embeddings on the Brown corpus, in the library and through a daemon: nearest neighbours of chosen words, tokens/s, time to embeddings"},
}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprintf(stderr, "Usage: smtd bench NAME [flags]\n\nEach prints one \"name: value\" line per figure. NAME is one of:\n")
		names := sortedKeys(benchmarks)
		slices.Sort(names)
		for _, n := range names {
			fmt.Fprintf(stderr, "  %-10s %s\n", n, benchmarks[n].help)
		}
		fmt.Fprintf(stderr, "\nRun \"smtd bench NAME --help\" for its flags.\n")
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "smtd bench: unknown benchmark %q (smtd bench --help lists them)\n", args[0])
		return errUsage
	}
	// SIGTERM cancels a bench as Ctrl-C does, so that it can stop the
	// daemon processes it started and remove what it created before it
	// returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return b.run(ctx, stdout, args[1:])
}
