package daemon

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/internal/state"
	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
)

// textModel codes word tokens 1-hot over an online vocabulary and, with
// SMT (smt.dim > 0), learns SMT word embeddings (smt-minimalistic App. B,
// package sgd's WordStats): the co-occurrences of tokens at most
// text.window apart in one message are accumulated as they stream, and
// the embeddings — the columns of P, from the closed form
// min ‖PAD‖² s.t. PVPᵀ = I — are solved every smt.solve_every minibatches
// and before every checkpoint.
//
// The output of a message is, with SMT, the mean of its tokens'
// embeddings, L2-normalised (zero while no token has one); without, the
// vocabulary id of each token. A solve is published as a whole: the
// vectors and the vocabulary they were solved for, so that a slot that
// changes word later never answers with another word's vector.
type textModel struct {
	vocab *online.Vocabulary

	// The SMT stage; stats is nil when it is off and in snapshots.
	stats      *sgd.WordStats
	embed      sgd.WordEmbedSettings
	solveEvery int
	sinceSolve int
	src        rand.Source
	publish    bool
	solved     *wordSolve // the last solve; nil before the first
	unsent     bool       // solved has not been published yet

	ids, lengths, msgIDs []int // workspaces

	// The owner's limits on the tokens of a worker's contribution (its
	// text.max_tokens and text.max_token_bytes), as decode applies them.
	maxTokens, maxTokenBytes int

	tokens int64 // in snapshots: the statistics' tokens and stored pairs
	pairs  int
}

// wordSolve is one solve of the word embeddings: immutable once made, and
// shared by the model and its snapshots.
type wordSolve struct {
	p       *mat.Dense // dim×vocabulary slots
	vectors *sgd.WordVectors
	vocab   *online.Vocabulary // as it was when solved
}

func newTextModel(p *config.Pipeline, src rand.Source) *textModel {
	m := &textModel{vocab: online.NewBoundedVocabulary(p.Text.Vocabulary, p.Text.VocabularyBytes), src: src}
	if p.SMT.Dim > 0 {
		m.stats = sgd.NewWordStats(sgd.WordSettings{
			Words: p.Text.Vocabulary, Window: p.Text.Window, MaxPairs: p.Text.MaxPairs, Memory: p.SMT.Memory,
		})
	}
	m.tune(p)
	return m
}

func (m *textModel) tune(p *config.Pipeline) {
	m.maxTokens, m.maxTokenBytes = p.Text.MaxTokens, p.Text.MaxTokenBytes
	if m.stats == nil {
		return
	}
	weighting, err := sgd.ParsePairWeighting(p.Text.Weighting)
	mustTune(err)
	m.embed = sgd.WordEmbedSettings{Dim: p.SMT.Dim, Drop: p.SMT.Drop, MinCount: p.Text.MinCount, Weighting: weighting}
	m.solveEvery, m.publish = p.SMT.SolveEvery, p.Text.PublishVocabulary
	s := m.stats.Settings()
	s.MaxPairs, s.Memory = p.Text.MaxPairs, p.SMT.Memory
	mustTune(m.stats.SetSettings(s))
}

func (m *textModel) encode(batch []sample) []output {
	out := make([]output, len(batch))
	for i, s := range batch {
		if m.embed.Dim > 0 {
			out[i] = output{vector: m.meanEmbedding(s.tokens), tokens: s.tokens, source: s}
			continue
		}
		v := make([]float32, len(s.tokens))
		for j, t := range s.tokens {
			id, ok := m.vocab.Lookup(t)
			if !ok {
				id = -1 // not (yet) in the vocabulary
			}
			v[j] = float32(id)
		}
		out[i] = output{vector: v, tokens: s.tokens, source: s}
	}
	return out
}

// meanEmbedding returns the normalised mean of the embeddings of the
// tokens that have one in the last solve.
func (m *textModel) meanEmbedding(tokens []string) []float32 {
	v := make([]float32, m.embed.Dim)
	sv := m.solved
	if sv == nil {
		return v
	}
	sum := make([]float64, sv.p.RawMatrix().Rows)
	for _, t := range tokens {
		if id, ok := sv.vocab.Lookup(t); ok && sv.vectors.Used(id) {
			for j, x := range sv.vectors.Vector(id) {
				sum[j] += x
			}
		}
	}
	var ss float64
	for _, x := range sum {
		ss += x * x
	}
	if ss > 0 {
		inv := 1 / math.Sqrt(ss)
		for j, x := range sum {
			v[j] = float32(x * inv)
		}
	}
	return v
}

func (m *textModel) learn(batch []sample) ([]output, error) {
	if m.stats == nil {
		out := make([]output, len(batch))
		for i, s := range batch {
			v := make([]float32, len(s.tokens))
			for j, t := range s.tokens {
				v[j] = float32(m.vocab.Add(t))
			}
			out[i] = output{vector: v, tokens: s.tokens, source: s}
		}
		return out, nil
	}
	msgs := make([][]string, len(batch))
	for i, s := range batch {
		msgs[i] = s.tokens
	}
	m.addMessages(msgs)
	var err error
	if m.sinceSolve++; m.sinceSolve >= m.solveEvery {
		err = m.solve()
	}
	return m.encode(batch), err
}

// addMessages adds the tokens of a minibatch's messages to the vocabulary
// and their co-occurrences to the statistics.
func (m *textModel) addMessages(msgs [][]string) {
	m.ids, m.lengths = m.ids[:0], m.lengths[:0]
	for _, tokens := range msgs {
		m.msgIDs = m.stats.AssignIDs(m.msgIDs, m.vocab, tokens)
		m.ids = append(m.ids, m.msgIDs...)
		m.lengths = append(m.lengths, len(tokens))
	}
	m.stats.Add(m.ids, m.lengths)
}

// solve replaces the embeddings by the closed-form solution of the
// statistics so far.
func (m *textModel) solve() error {
	m.sinceSolve = 0
	var p mat.Dense
	if _, err := m.stats.Embed(&p, m.embed, m.src); err != nil {
		return fmt.Errorf("smtd: word embeddings: %w", err)
	}
	m.solved = &wordSolve{p: &p, vectors: sgd.NewWordVectors(&p), vocab: m.vocab.Clone()}
	m.unsent = m.publish
	return nil
}

// takeSolve returns the solve not yet published, once.
func (m *textModel) takeSolve() *wordSolve {
	if !m.unsent {
		return nil
	}
	m.unsent = false
	return m.solved
}

// flush solves before a checkpoint, so that the checkpoint's embeddings
// are those of its statistics and vocabulary.
func (m *textModel) flush() error {
	if m.stats == nil || m.sinceSolve == 0 {
		return nil
	}
	return m.solve()
}

// snapshot shares the immutable solve; the vocabulary is copied, and the
// statistics' counters for status.
func (m *textModel) snapshot() model {
	s := &textModel{vocab: m.vocab.Clone(), embed: m.embed, solved: m.solved}
	if m.stats != nil {
		s.tokens, s.pairs = m.stats.Tokens(), m.stats.StoredPairs()
	}
	return s
}

// reader is the snapshot m itself: a text model encodes without writing
// (the mean of immutable word vectors, or vocabulary ids).
func (m *textModel) reader(model) model { return m }

func (m *textModel) rollback(to model) {
	s := to.(*textModel)
	m.vocab, m.solved = s.vocab.Clone(), s.solved
}

func (m *textModel) check() error {
	if m.stats != nil {
		if err := stageError("word statistics", m.stats.Check()); err != nil {
			return err
		}
	}
	if m.solved == nil {
		return nil
	}
	return stageError("word embeddings", m.solved.vectors.Check())
}

func (m *textModel) sections() ([]Section, error) {
	b, err := m.vocab.MarshalBinary()
	if err != nil || m.stats == nil {
		return []Section{{Name: "vocabulary", Data: b}}, err
	}
	secs := []Section{{Name: "vocabulary", Data: b}}
	if b, err = m.stats.MarshalBinary(); err != nil {
		return nil, err
	}
	secs = append(secs, Section{Name: "word-stats", Data: b})
	// The embeddings are stored only when they are those of this
	// vocabulary (flush solved them just now): else a restore could pair
	// a slot with another word's vector.
	e := state.NewEncoder(nil)
	e.Uvarint(uint64(m.sinceSolve))
	if m.solved != nil && m.sinceSolve == 0 {
		// Most columns are zero (words below text.min_count).
		p := mat.DenseCopyOf(m.solved.p).RawMatrix()
		e.U8(1)
		e.Uvarint(uint64(p.Rows))
		e.Sparse(p.Data)
	} else {
		e.U8(0)
	}
	return append(secs, Section{Name: "word-embeddings", Data: e.Bytes()}), nil
}

func (m *textModel) restore(secs []Section) error {
	b, err := findSection(secs, "vocabulary")
	if err != nil {
		return err
	}
	v := online.NewVocabulary(m.vocab.Size())
	if err := v.UnmarshalBinary(b); err != nil {
		return err
	}
	if v.Size() != m.vocab.Size() {
		return fmt.Errorf("smtd: checkpoint vocabulary holds %d words, config text.vocabulary is %d", v.Size(), m.vocab.Size())
	}
	// The configured byte bound applies to a checkpoint written under
	// another one, or under none (vocabulary format 1).
	evicted := v.SetMaxBytes(nil, m.vocab.MaxBytes())
	if m.stats == nil {
		m.vocab = v
		return nil
	}
	if b, err = findSection(secs, "word-stats"); err != nil {
		return err
	}
	stats := sgd.NewWordStats(m.stats.Settings())
	if err := stats.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("word-stats: %w", err)
	}
	if stats.Settings().Words != m.stats.Settings().Words || stats.Settings().Window != m.stats.Settings().Window {
		return fmt.Errorf("word-stats: checkpoint has %d words, window %d; config %d, %d", stats.Settings().Words, stats.Settings().Window, m.stats.Settings().Words, m.stats.Settings().Window)
	}
	if b, err = findSection(secs, "word-embeddings"); err != nil {
		return err
	}
	d := state.NewDecoder(b)
	since := d.Uvarint()
	var solved *wordSolve
	if d.U8() == 1 {
		if rows := d.Uvarint(); rows != uint64(m.embed.Dim) {
			return fmt.Errorf("word-embeddings: dimension %d, config smt.dim is %d", rows, m.embed.Dim)
		}
		p := mat.NewDense(m.embed.Dim, v.Size(), nil)
		d.Sparse(p.RawMatrix().Data)
		solved = &wordSolve{p: p, vectors: sgd.NewWordVectors(p), vocab: v.Clone()}
	}
	if !d.Done() {
		return fmt.Errorf("word-embeddings: bad encoding")
	}
	for _, id := range evicted {
		stats.Reset(id)
	}
	if len(evicted) > 0 {
		// The embeddings were solved for words no longer kept.
		solved, since = nil, max(since, 1)
	}
	m.vocab, m.stats, m.solved, m.sinceSolve = v, stats, solved, int(since)
	return nil
}

func (m *textModel) describe() map[string]any {
	d := map[string]any{
		"vocabulary_size": m.vocab.Size(), "words": m.vocab.Len(),
		"vocabulary_bytes": m.vocab.Bytes(), "vocabulary_max_bytes": m.vocab.MaxBytes(),
	}
	if m.embed.Dim > 0 {
		d["smt_dim"] = m.embed.Dim
		embedded := 0
		if m.solved != nil {
			for id := range m.solved.vectors.Len() {
				if m.solved.vectors.Used(id) {
					embedded++
				}
			}
		}
		d["words_embedded"] = embedded
	}
	if m.stats != nil {
		d["tokens"], d["word_pairs_stored"] = m.stats.Tokens(), m.stats.StoredPairs()
	} else if m.embed.Dim > 0 {
		d["tokens"], d["word_pairs_stored"] = m.tokens, m.pairs
	}
	return d
}

// vocabularyChunk is one message of a vocabulary publication: the
// embeddings of up to vocabularyChunkWords words of one solve.
type vocabularyChunk struct {
	Pipeline     string      `json:"pipeline"`
	ModelVersion uint64      `json:"model_version"`
	Chunk        int         `json:"chunk"`
	Chunks       int         `json:"chunks"`
	Dim          int         `json:"dim"`
	Words        []string    `json:"words"`
	Vectors      [][]float32 `json:"vectors"`
}

const vocabularyChunkWords = 256

// vocabularyChunks splits the embedded words of a solve, in slot order,
// into the messages of one publication.
func (sv *wordSolve) vocabularyChunks(pipeline string, version uint64) []vocabularyChunk {
	ids := sv.embedded()
	n := (len(ids) + vocabularyChunkWords - 1) / vocabularyChunkWords
	chunks := make([]vocabularyChunk, n)
	for c := range chunks {
		part := ids[c*vocabularyChunkWords : min((c+1)*vocabularyChunkWords, len(ids))]
		ch := vocabularyChunk{Pipeline: pipeline, ModelVersion: version, Chunk: c, Chunks: n, Dim: sv.p.RawMatrix().Rows}
		for _, id := range part {
			ch.Words = append(ch.Words, sv.vocab.Word(id))
			ch.Vectors = append(ch.Vectors, float32s(sv.vectors.Vector(id)))
		}
		chunks[c] = ch
	}
	return chunks
}

// embedded returns the slots of the words the solve embeds, in order.
func (sv *wordSolve) embedded() []int {
	var ids []int
	for id := range sv.vectors.Len() {
		if sv.vectors.Used(id) && id < sv.vocab.Slots() && sv.vocab.Word(id) != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

func float32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
