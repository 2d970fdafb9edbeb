package daemon

import (
	"fmt"
	"math/rand/v2"
	"unicode/utf8"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
)

// Text in worker mode (config.Workers). A worker decodes and validates
// the messages of its minibatch, publishes their outputs (the mean
// embedding of their tokens under the newest solve it holds) and sends
// their tokens. The owner keeps the vocabulary: it maps the tokens of a
// step's minibatches to it and adds their co-occurrences to the word
// statistics (smt-minimalistic App. B) minibatch by minibatch, in
// sequence order, as a single daemon adds them. The vocabulary and the
// statistics are thus a single daemon's whatever the workers and the
// staleness; only the solves fall at the end of the step that brings
// smt.solve_every minibatches since the last (the same minibatches as
// one daemon's when workers.merge divides smt.solve_every).
//
// A model version is the last solve: the words that have an embedding
// and their vectors, all a worker needs to embed a message. The
// expensive parts of text, the pair counting and the solve, are the
// owner's: workers take over decoding, validation and the outputs.

// contribute returns the tokens of every message of batch (their number,
// then each message's count of tokens and each token's length and bytes,
// uvarints) and the outputs of the batch. It uses neither src nor ahead,
// and sends no floats.
func (m *textModel) contribute(batch []sample, _ rand.Source, _, _ int) ([]byte, []output) {
	e := state.NewEncoder(nil)
	e.Uvarint(uint64(len(batch)))
	for _, s := range batch {
		e.Uvarint(uint64(len(s.tokens)))
		for _, t := range s.tokens {
			e.Uvarint(uint64(len(t)))
			e.Raw([]byte(t))
		}
	}
	return e.Bytes(), m.encode(batch)
}

// decodeTokens reads a contribution's messages as contribute wrote them,
// each within the owner's text.max_tokens and text.max_token_bytes, its
// tokens valid UTF-8, as decode makes them.
func (m *textModel) decodeTokens(b []byte) ([][]string, error) {
	r := state.NewDecoder(b)
	n := r.Uvarint()
	if r.Bad() || n == 0 || n > uint64(r.Len()) {
		return nil, fmt.Errorf("%w: messages", errContribution)
	}
	msgs := make([][]string, n)
	for i := range msgs {
		k := r.Uvarint()
		if r.Bad() || k > uint64(m.maxTokens) || k > uint64(r.Len()) {
			return nil, fmt.Errorf("%w: message %d: tokens", errContribution, i)
		}
		tokens := make([]string, k)
		for j := range tokens {
			l := r.Uvarint()
			if r.Bad() || l == 0 || l > uint64(m.maxTokenBytes) || l > uint64(r.Len()) {
				return nil, fmt.Errorf("%w: message %d: a token's length", errContribution, i)
			}
			tokens[j] = string(r.Bytes(int(l)))
			if !utf8.ValidString(tokens[j]) {
				return nil, fmt.Errorf("%w: message %d: a token not UTF-8", errContribution, i)
			}
		}
		msgs[i] = tokens
	}
	if !r.Done() {
		return nil, fmt.Errorf("%w: %d trailing bytes", errContribution, r.Len())
	}
	return msgs, nil
}

// applyContributions adds the messages of each contribution, one
// minibatch each, to the vocabulary and the statistics, and solves when
// smt.solve_every minibatches have been added since the last solve.
func (m *textModel) applyContributions(enc [][]byte) error {
	batches := make([][][]string, len(enc))
	for i, b := range enc {
		var err error
		if batches[i], err = m.decodeTokens(b); err != nil {
			return fmt.Errorf("%w: %w", errRefused, err)
		}
	}
	for _, msgs := range batches {
		m.addMessages(msgs)
	}
	if m.sinceSolve += len(enc); m.sinceSolve >= m.solveEvery {
		return m.solve()
	}
	return nil
}

// wordVectorsSection is the section of a text model version.
const wordVectorsSection = "word-vectors"

// workerSections returns the last solve: smt.dim, the number of words
// embedded, then each word (length and bytes) and its column of P
// (float64s), in slot order. Before the first solve there are none.
func (m *textModel) workerSections() ([]Section, error) {
	e := state.NewEncoder(nil)
	e.Uvarint(uint64(m.embed.Dim))
	sv := m.solved
	var ids []int
	if sv != nil {
		ids = sv.embedded()
	}
	e.Uvarint(uint64(len(ids)))
	col := make([]float64, m.embed.Dim)
	for _, id := range ids {
		w := sv.vocab.Word(id)
		e.Uvarint(uint64(len(w)))
		e.Raw([]byte(w))
		e.F64s(mat.Col(col, id, sv.p))
	}
	return []Section{{Name: wordVectorsSection, Data: e.Bytes()}}, nil
}

// withWorkerSections returns a model that embeds as the solve of secs:
// its words in a vocabulary of their own, in the same order, and their
// columns of P, which sgd.NewWordVectors scales as the owner's, so that a
// message's mean embedding adds the same vectors in the same order.
func (m *textModel) withWorkerSections(secs []Section) (workModel, error) {
	b, err := findSection(secs, wordVectorsSection)
	if err != nil {
		return nil, err
	}
	r := state.NewDecoder(b)
	dim, n := r.Uvarint(), r.Uvarint()
	// A word costs at least 2 + 8·dim bytes: checked before the memory
	// for n words is taken.
	if r.Bad() || dim == 0 || dim > 1<<12 || n > uint64(r.Len())/(2+8*dim) {
		return nil, fmt.Errorf("smtd: a text model version of dimension %d with %d words", dim, n)
	}
	s := &textModel{vocab: m.vocab, embed: m.embed}
	s.embed.Dim = int(dim)
	if n == 0 {
		return s, nil
	}
	vocab := online.NewVocabulary(int(n))
	p := mat.NewDense(int(dim), int(n), nil)
	col := make([]float64, dim)
	for id := range int(n) {
		l := r.Uvarint()
		if r.Bad() || l == 0 || l > uint64(r.Len()) {
			return nil, fmt.Errorf("smtd: a text model version's word %d", id)
		}
		w := string(r.Bytes(int(l)))
		r.F64s(col)
		if r.Bad() || vocab.Add(w) != id {
			return nil, fmt.Errorf("smtd: a text model version's word %d", id)
		}
		p.SetCol(id, col)
	}
	if !r.Done() {
		return nil, fmt.Errorf("smtd: a text model version with %d trailing bytes", r.Len())
	}
	s.solved = &wordSolve{p: p, vectors: sgd.NewWordVectors(p), vocab: vocab}
	return s, nil
}
