package daemon

import (
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"gonum.org/v1/gonum/floats"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/online"
)

// frames builds a batch of one-patch frames: "a3" is frame 3 of stream a,
// its code atom 3 with weight 0.5 (the frame index modulo testAtoms, so
// triples are easy to read).
func frames(names ...string) ([]sample, *online.SparseCodes) {
	batch := make([]sample, len(names))
	codes := &online.SparseCodes{Atoms: testAtoms, Ptr: []int{0}}
	for i, n := range names {
		var f uint64
		fmt.Sscanf(n[1:], "%d", &f)
		batch[i] = sample{stream: n[:1], frame: f}
		codes.Index = append(codes.Index, int(f%testAtoms))
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
		jump        uint64   // the horizon; 0: the default
		want        []string // "prev,cur,next" per triple, in release order
		late, gaps  int64
		evicted     int64
		restarts    int64
	}{
		{name: "in order", batches: [][]string{{"a0", "a1", "a2", "a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}},
		{name: "across batches", batches: [][]string{{"a0", "a1"}, {"a2"}, {"a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}},
		{name: "interleaved streams", batches: [][]string{{"a0", "b5", "a1", "b6", "a2", "b7"}}, max: 4, window: 2, want: []string{"0,1,2", "5,6,7"}},
		{name: "reordered", batches: [][]string{{"a0", "a2", "a1", "a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}},
		{name: "gap breaks the chain", batches: [][]string{{"a0", "a1", "a3", "a4", "a5", "a6"}}, max: 4, window: 2, want: []string{"3,4,5", "4,5,6"}, gaps: 1},
		{name: "gap without reordering", batches: [][]string{{"a0", "a1", "a2", "a4", "a5", "a6"}}, max: 4, window: 0, want: []string{"0,1,2", "4,5,6"}, gaps: 1},
		{name: "late and repeated frames", batches: [][]string{{"a0", "a1", "a2", "a1", "a3", "a3"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}, late: 2},
		{name: "forgotten stream restarts", batches: [][]string{{"a0", "a1", "b0", "a2", "b1", "c0", "b2", "a3"}}, max: 2, window: 0, want: []string{"0,1,2", "0,1,2"}, evicted: 2},
		// The horizon: a frame further than it from its stream's newest
		// restarts the chain, ahead or behind, across batches too.
		{name: "2^63-1 then 10, 11, 12", batches: [][]string{{"a0", "a1", "a2", "a9223372036854775807"}, {"a10", "a11", "a12", "a13"}}, max: 4, window: 2, want: []string{"0,1,2", "10,11,12", "11,12,13"}, restarts: 2},
		{name: "2^64-1 then 0, 1, 2", batches: [][]string{{"a0", "a18446744073709551615"}, {"a0", "a1", "a2"}}, max: 4, window: 2, want: []string{"0,1,2"}, restarts: 2},
		{name: "far behind", batches: [][]string{{"a5000", "a5001", "a5002", "a0", "a1", "a2"}}, max: 4, window: 2, want: []string{"0,1,2", "0,1,2"}, restarts: 1},
		{name: "behind within the horizon is late", batches: [][]string{{"a500", "a501", "a502", "a0", "a503"}}, max: 4, window: 2, want: []string{"0,1,2", "1,2,3"}, late: 1},
		{name: "ahead at the horizon is a gap", batches: [][]string{{"a0", "a1", "a2", "a7", "a8", "a9"}}, max: 4, window: 0, jump: 5, want: []string{"0,1,2", "7,8,9"}, gaps: 1},
		{name: "ahead past the horizon restarts", batches: [][]string{{"a0", "a1", "a2", "a8", "a9", "a10"}}, max: 4, window: 0, jump: 5, want: []string{"0,1,2", "8,9,10"}, restarts: 1},
		{name: "restart releases the window first", batches: [][]string{{"a0", "a1", "a3", "a9000", "a9001", "a9002"}}, max: 4, window: 2, want: []string{"0,1,2"}, gaps: 1, restarts: 1},
		{name: "other streams unaffected", batches: [][]string{{"a0", "b0", "a1", "b1", "a9223372036854775807", "b2", "a10", "a11", "a12"}}, max: 4, window: 2, want: []string{"0,1,2", "10,11,12"}, restarts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newFrameTracker(tc.max, tc.window, testAtoms)
			if tc.jump > 0 {
				tr.maxJump = tc.jump
			}
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
				restored.maxJump = tr.maxJump
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
			if tr.late != tc.late || tr.gaps != tc.gaps || tr.evicted != tc.evicted || tr.restarts != tc.restarts {
				t.Errorf("late %d, gaps %d, forgotten %d, restarts %d; want %d, %d, %d, %d",
					tr.late, tr.gaps, tr.evicted, tr.restarts, tc.late, tc.gaps, tc.evicted, tc.restarts)
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

// A tracker checkpointed in version 2, before the horizon, is restored
// with no restarts counted and goes on as it would have.
func TestFrameTrackerReadsVersion2(t *testing.T) {
	// frames("a0", "a1", "a3", "b7", "b8", "a1") in a tracker of 4 streams,
	// reorder 2: a waits for 2 with 3 in its window, one late frame.
	v2, _ := hex.DecodeString("020601000002016106020201010100000000000000e03f01010101000000000000e03f010301010103000000000000e03f016205090201010107000000000000e03f01010108000000000000e03f00")
	tr := newFrameTracker(4, 2, testAtoms)
	if err := tr.UnmarshalBinary(v2); err != nil {
		t.Fatal(err)
	}
	if tr.late != 1 || tr.restarts != 0 || len(tr.streams) != 2 {
		t.Fatalf("restored late %d, restarts %d, %d streams", tr.late, tr.restarts, len(tr.streams))
	}
	batch, codes := frames("a2", "b9")
	tr.add(batch, codes, 1)
	var got []string
	for i := range tr.cur.Rows {
		p, _ := tr.prev.Row(i)
		c, _ := tr.cur.Row(i)
		n, _ := tr.next.Row(i)
		got = append(got, fmt.Sprintf("%d,%d,%d", p[0], c[0], n[0]))
	}
	if want := []string{"0,1,2", "1,2,3", "7,8,9"}; !slices.Equal(got, want) {
		t.Errorf("triples %v, want %v", got, want)
	}
}

// In a daemon, one frame numbered 2⁶³−1 does not make the rest of its
// stream late (reorder 0: released at once) or sit in its reorder window
// (reorder 2): the frames after it form triples again.
func TestVideoFrameFarAhead(t *testing.T) {
	for _, reorder := range []int{0, 2} {
		t.Run(fmt.Sprintf("reorder %d", reorder), func(t *testing.T) {
			p := config.DefaultPipeline(config.Video, "frames")
			p.KMeans.Atoms = 16
			p.SMT.Dim = 4
			p.Deterministic = true
			p.Batch.Size = 1
			p.Video.Reorder = reorder
			d := startDaemon(t, testConfig(t, p))
			nc := connect(t, d.ClientURL())
			msgs := readStream(t, "video-2x48.smtdrec")
			stream := msgs[0].Header.Get(HeaderStream)
			var sent int64
			for i, index := range []uint64{0, 1, 2, 1<<63 - 1, 10, 11, 12, 13, 14} {
				m := natsMsg("smtd.in.frames", msgs[i].Header, msgs[i].Data)
				m.Header.Set(HeaderStream, stream)
				m.Header.Set(HeaderFrame, strconv.FormatUint(index, 10))
				if err := nc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
				sent++
			}
			waitFor(t, time.Minute, "frames learned", func() bool { return pipelineStatus(d, "frames").Learned == sent })
			model := pipelineStatus(d, "frames").Model
			if model["video_frames_late"] != int64(0) || model["video_gaps"] != int64(0) {
				t.Errorf("video tracking %v: want no late frames and no gaps", model)
			}
			if r, ok := model["video_chain_restarts"]; ok && r != int64(2) {
				t.Errorf("video_chain_restarts %v, want 2", r)
			}
		})
	}
}
