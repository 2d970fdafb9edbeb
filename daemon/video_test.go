package daemon

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/floats"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/online"
)

// frames builds a batch of one-patch frames: "a3" is frame 3 of stream a,
// its code atom 3 with weight 0.5 (the frame index, so triples are easy
// to read).
func frames(names ...string) ([]sample, *online.SparseCodes) {
	batch := make([]sample, len(names))
	codes := &online.SparseCodes{Atoms: testAtoms, Ptr: []int{0}}
	for i, n := range names {
		var f uint64
		fmt.Sscanf(n[1:], "%d", &f)
		batch[i] = sample{stream: n[:1], frame: f}
		codes.Index = append(codes.Index, int(f))
		codes.Cos = append(codes.Cos, 0.5)
		codes.Ptr = append(codes.Ptr, i+1)
		codes.Rows++
	}
	return batch, codes
}

const testAtoms = 100

// The tracker links frames t−1, t, t+1 of the same stream only: in order,
// across interleaved streams, through small reordering; a dropped frame
// breaks the chain, late and repeated frames are left out, and the least
// recently seen stream is forgotten past the limit.
func TestFrameTrackerTriples(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batches     [][]string
		max, window int
		want        []string // "prev,cur,next" per triple, in release order
		late, gaps  int64
		evicted     int64
	}{
		{name: "in order", batches: [][]string{{"a0", "a1", "a2", "a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}},
		{name: "across batches", batches: [][]string{{"a0", "a1"}, {"a2"}, {"a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}},
		{name: "interleaved streams", batches: [][]string{{"a0", "b5", "a1", "b6", "a2", "b7"}}, max: 4, window: 2, want: []string{"0,1,2", "5,6,7"}},
		{name: "reordered", batches: [][]string{{"a0", "a2", "a1", "a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}},
		{name: "gap breaks the chain", batches: [][]string{{"a0", "a1", "a3", "a4", "a5", "a6"}}, max: 4, window: 2, want: []string{"3,4,5", "4,5,6"}, gaps: 1},
		{name: "gap without reordering", batches: [][]string{{"a0", "a1", "a2", "a4", "a5", "a6"}}, max: 4, window: 0, want: []string{"0,1,2", "4,5,6"}, gaps: 1},
		{name: "late and repeated frames", batches: [][]string{{"a0", "a1", "a2", "a1", "a3", "a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}, late: 2},
		{name: "forgotten stream restarts", batches: [][]string{{"a0", "a1", "b0", "a2", "b1", "c0", "b2", "a3"}}, max: 2, window: 0, want: []string{"0,1,2", "0,1,2"}, evicted: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newFrameTracker(tc.max, tc.window, testAtoms)
			var got []string
			for _, names := range tc.batches {
				batch, codes := frames(names...)
				tr.add(batch, codes, 1)
				for i := range tr.cur.Rows {
					p, _ := tr.prev.Row(i)
					c, w := tr.cur.Row(i)
					n, _ := tr.next.Row(i)
					if w[0] != 0.5 {
						t.Fatalf("weight %v, want 0.5", w[0])
					}
					got = append(got, fmt.Sprintf("%d,%d,%d", p[0], c[0], n[0]))
				}
				// A checkpoint between batches changes nothing.
				b, err := tr.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				restored := newFrameTracker(tc.max, tc.window, testAtoms)
				if err := restored.UnmarshalBinary(b); err != nil {
					t.Fatal(err)
				}
				if b2, _ := restored.MarshalBinary(); !slices.Equal(b, b2) {
					t.Fatal("tracker does not round-trip")
				}
				tr = restored
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("triples %v, want %v", got, tc.want)
			}
			if tr.late != tc.late || tr.gaps != tc.gaps || tr.evicted != tc.evicted {
				t.Errorf("late %d, gaps %d, forgotten %d; want %d, %d, %d", tr.late, tr.gaps, tr.evicted, tc.late, tc.gaps, tc.evicted)
			}
		})
	}
}

func TestFrameTrackerRejectsBadState(t *testing.T) {
	tr := newFrameTracker(4, 2, testAtoms)
	batch, codes := frames("a0", "a1")
	tr.add(batch, codes, 1)
	b, _ := tr.MarshalBinary()
	for _, bad := range [][]byte{nil, {9}, b[:len(b)-1], append(slices.Clone(b), 0)} {
		if err := newFrameTracker(4, 2, testAtoms).UnmarshalBinary(bad); err == nil {
			t.Errorf("state %v accepted", bad)
		}
	}
}

// A video pipeline on f_gq codes learns the temporal SMT from their
// soft-thresholded cosines and publishes finite, normalised embeddings.
func TestVideoWeightedCodes(t *testing.T) {
	p := config.DefaultPipeline(config.Video, "frames")
	p.KMeans.Atoms = 32
	p.KMeans.Code = config.CodeGQ
	p.SMT.Dim = 8
	d := startDaemon(t, testConfig(t, p))
	nc := connect(t, d.ClientURL())
	n := replayFile(t, nc, "video-2x48.smtdrec", "")
	waitFor(t, time.Minute, "frames learned", func() bool { return pipelineStatus(d, "frames").Learned == int64(n) })
	model := pipelineStatus(d, "frames").Model
	if model["smt_steps"] == int64(0) || model["video_gaps"] != int64(0) {
		t.Fatalf("temporal SMT on f_gq codes: %v", model)
	}
	out := embed(t, nc, "frames", readStream(t, "video-2x48.smtdrec")[:4])
	for i := range 4 {
		row := out.RawRowView(i)
		for j := 0; j < len(row); j += 8 {
			if n := floats.Norm(row[j:j+8], 2); math.Abs(n-1) > 1e-5 && n != 0 {
				t.Fatalf("frame %d position %d: norm %v", i, j/8, n)
			}
		}
	}
}
