package feed

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testdata = "../testdata/feed"

func collect(t *testing.T, src Source) []Item {
	t.Helper()
	var items []Item
	for it, err := range src.Items {
		if err != nil {
			t.Fatalf("%s: %v", it.Name, err)
		}
		items = append(items, it)
	}
	return items
}

// The test clip is 5 frames of 32x32 4:2:0: a bright bar 6 pixels wide
// at x = 8+2f in frame f over a vertical ramp 16+4y.
func TestY4MReadsTheLumaPlaneOfEachFrame(t *testing.T) {
	f, err := os.Open(filepath.Join(testdata, "clip.y4m"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	y, err := NewY4M(f)
	if err != nil {
		t.Fatal(err)
	}
	if w, h := y.Size(); w != 32 || h != 32 {
		t.Fatalf("size %dx%d, want 32x32", w, h)
	}
	for i := 0; ; i++ {
		img, err := y.Next()
		if err == io.EOF {
			if i != 5 {
				t.Fatalf("%d frames, want 5", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, px := range []struct{ x, y int }{{0, 0}, {8 + 2*i, 3}, {13 + 2*i, 31}, {14 + 2*i, 5}} {
			want := byte(16 + 4*px.y)
			if px.x >= 8+2*i && px.x < 14+2*i {
				want = 235
			}
			if got := img.GrayAt(px.x, px.y).Y; got != want {
				t.Errorf("frame %d pixel (%d,%d) = %d, want %d", i, px.x, px.y, got, want)
			}
		}
	}
}

func TestY4MRefusesWhatItCannotRead(t *testing.T) {
	frame := "FRAME\n" + strings.Repeat("\x10", 4*2)
	for _, tc := range []struct{ name, in, want string }{
		{"signature", "MPEG4 W4 H2\n", "no YUV4MPEG2 signature"},
		{"no size", "YUV4MPEG2 F25:1\n", "without W and H"},
		{"bad width", "YUV4MPEG2 Wx H2\n", `"Wx"`},
		{"10-bit", "YUV4MPEG2 W4 H2 C420p10\n", "colour space"},
		{"marker", "YUV4MPEG2 W4 H2 Cmono\nFRAMEX\n", "FRAME marker"},
		{"truncated", "YUV4MPEG2 W4 H2 Cmono\n" + frame + "FRAME\n\x10\x10", "frame 1"},
		{"huge", "YUV4MPEG2 W32768 H32768\n", "larger than 64 megapixels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y, err := NewY4M(strings.NewReader(tc.in))
			for err == nil {
				_, err = y.Next()
			}
			if err == io.EOF || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestY4MFramesResizeToTheShapeAndNumberFrames(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("YUV4MPEG2 W8 H4 Cmono\n")
	for f := range 3 {
		b.WriteString("FRAME\n")
		b.Write(bytes.Repeat([]byte{byte(50 * f)}, 32))
	}
	src, err := Y4MFrames("frames", Shape{4, 2, 1}, &b, "cam")
	if err != nil {
		t.Fatal(err)
	}
	items := collect(t, src)
	if len(items) != 3 {
		t.Fatalf("%d items, want 3", len(items))
	}
	for i, it := range items {
		if got := it.Header.Get("Smtd-Frame"); got != fmt.Sprint(i) || it.Header.Get("Smtd-Stream") != "cam" {
			t.Errorf("item %d: stream %q frame %q", i, it.Header.Get("Smtd-Stream"), got)
		}
		if it.Header.Get("Smtd-Shape") != "2,4,1" || it.Header.Get("Smtd-Dtype") != "uint8" {
			t.Errorf("item %d: headers %v", i, it.Header)
		}
		if !bytes.Equal(it.Data, bytes.Repeat([]byte{byte(50 * i)}, 8)) {
			t.Errorf("item %d: data %v, want 8 times %d", i, it.Data, 50*i)
		}
	}
	if items[0].ID == items[1].ID {
		t.Error("two frames have one message id")
	}
}

func TestRawFramesEndsWithAPartialFrame(t *testing.T) {
	src := RawFrames("frames", Shape{2, 2, 1}, bytes.NewReader(make([]byte, 4*2+3)), 2, 2, "s")
	n := 0
	var last error
	for _, err := range src.Items {
		if err != nil {
			last = err
			break
		}
		n++
	}
	if n != 2 || !errors.Is(last, io.ErrUnexpectedEOF) {
		t.Errorf("%d frames then %v, want 2 then a partial frame", n, last)
	}
}

// photo.jpg is 64x48: red on the left half, blue on the right. Cut to a
// square, its centre still has red on the left and blue on the right.
func TestRawCutsResizesAndConvertsToGray(t *testing.T) {
	f, err := os.Open(filepath.Join(testdata, "photo.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	rgb := Raw(nil, img, Shape{8, 8, 3})
	if len(rgb) != 8*8*3 {
		t.Fatalf("%d bytes, want %d", len(rgb), 8*8*3)
	}
	left, right := rgb[3*(4*8+0):], rgb[3*(4*8+7):]
	if left[0] < 150 || left[2] > 80 || right[2] < 150 || right[0] > 80 {
		t.Errorf("left pixel %v, right pixel %v: want red, blue", left[:3], right[:3])
	}
	gray := Raw(nil, img, Shape{8, 8, 1})
	wantLeft := color.GrayModel.Convert(color.RGBA{200, 30, 30, 255}).(color.Gray).Y
	wantRight := color.GrayModel.Convert(color.RGBA{30, 30, 200, 255}).(color.Gray).Y
	if d := int(gray[4*8]) - int(wantLeft); d < -8 || d > 8 {
		t.Errorf("left gray %d, want about %d", gray[4*8], wantLeft)
	}
	if d := int(gray[4*8+7]) - int(wantRight); d < -8 || d > 8 {
		t.Errorf("right gray %d, want about %d", gray[4*8+7], wantRight)
	}
}

func TestCentre(t *testing.T) {
	for _, tc := range []struct {
		r    image.Rectangle
		s    Shape
		want image.Rectangle
	}{
		{image.Rect(0, 0, 64, 48), Shape{8, 8, 1}, image.Rect(8, 0, 56, 48)},
		{image.Rect(0, 0, 48, 64), Shape{8, 8, 1}, image.Rect(0, 8, 48, 56)},
		{image.Rect(0, 0, 30, 10), Shape{3, 1, 1}, image.Rect(0, 0, 30, 10)},
		{image.Rect(0, 0, 100, 1), Shape{1, 100, 1}, image.Rect(49, 0, 50, 1)},
	} {
		if got := centre(tc.r, tc.s); got != tc.want {
			t.Errorf("centre(%v, %v) = %v, want %v", tc.r, tc.s, got, tc.want)
		}
	}
}

func TestImagesAreLabelledByTheirDirectoryOrTheCSV(t *testing.T) {
	dir := filepath.Join(testdata, "images")
	src, err := Images("images", Shape{28, 28, 1}, []string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if src.Total != 6 {
		t.Fatalf("Total %d, want 6", src.Total)
	}
	items := collect(t, src)
	labels := map[string]int{}
	ids := map[string]bool{}
	for _, it := range items {
		labels[it.Header.Get("Smtd-Label")]++
		ids[it.ID] = true
		if len(it.Data) != 28*28 || it.Header.Get("Nats-Msg-Id") != it.ID {
			t.Errorf("%s: %d bytes, id header %q", it.Name, len(it.Data), it.Header.Get("Nats-Msg-Id"))
		}
	}
	if labels["even"] != 3 || labels["odd"] != 3 || len(ids) != 6 {
		t.Errorf("labels %v, %d distinct ids; want 3 even, 3 odd, 6 ids", labels, len(ids))
	}
	// The same files give the same ids; another label, other ids.
	again := collect(t, must(Images("images", Shape{28, 28, 1}, []string{dir}, nil)))
	for i := range items {
		if again[i].ID != items[i].ID {
			t.Errorf("%s: id %s then %s", items[i].Name, items[i].ID, again[i].ID)
		}
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Rows name a file below the directory given, by base name, by its
	// absolute path (the directory given relative), and by its path from
	// the working directory (the directory given absolute); one names
	// none.
	csv := "path,label\neven/digit-0.png,zero\ndigit-3.png, three\n" + filepath.Join(absDir, "odd", "digit-5.png") + ",five\n" +
		filepath.ToSlash(filepath.Join(dir, "odd", "digit-1.png")) + ",one\nnone.png,x\n"
	l, err := ReadLabels(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if u, err := l.Unmatched([]string{dir}); err != nil || len(u) != 1 || u[0] != "none.png" {
		t.Errorf("unmatched rows %q, %v; want none.png", u, err)
	}
	relabelled := collect(t, must(Images("images", Shape{28, 28, 1}, []string{absDir}, l)))
	got := map[string]string{}
	for i, it := range relabelled {
		got[filepath.Base(it.Name)] = it.Header.Get("Smtd-Label")
		if changed := it.Header.Get("Smtd-Label") != items[i].Header.Get("Smtd-Label"); changed != (it.ID != items[i].ID) {
			t.Errorf("%s: label changed %v, id changed %v", it.Name, changed, it.ID != items[i].ID)
		}
	}
	if got["digit-0.png"] != "zero" || got["digit-3.png"] != "three" || got["digit-2.png"] != "even" ||
		got["digit-5.png"] != "five" || got["digit-1.png"] != "one" {
		t.Errorf("labels %v", got)
	}
}

func must(s Source, err error) Source {
	if err != nil {
		panic(err)
	}
	return s
}

func TestTextLinesAndParagraphs(t *testing.T) {
	in := "one two\r\n\n  \nthree\nfour five\n\nsix"
	var lines []string
	for _, it := range collect(t, Text("words", strings.NewReader(in), "in.txt", false)) {
		lines = append(lines, it.Name+"="+string(it.Data))
	}
	if got := strings.Join(lines, "|"); got != "in.txt:1=one two|in.txt:4=three|in.txt:5=four five|in.txt:7=six" {
		t.Errorf("lines %s", got)
	}
	var paras []string
	for _, it := range collect(t, Text("words", strings.NewReader(in), "in.txt", true)) {
		paras = append(paras, it.Name+"="+string(it.Data))
	}
	if got := strings.Join(paras, "|"); got != "in.txt:1=one two|in.txt:4=three\nfour five|in.txt:7=six" {
		t.Errorf("paragraphs %q", got)
	}
	// The same file named another way gives the same ids.
	a := collect(t, Text("words", strings.NewReader("x\n"), "dir/in.txt", false))
	b := collect(t, Text("words", strings.NewReader("x\n"), "./dir//in.txt", false))
	if a[0].ID != b[0].ID {
		t.Error("dir/in.txt and ./dir//in.txt give different ids")
	}
	// A repeated line is another message: its position is in its id.
	items := collect(t, Text("words", strings.NewReader("a\na\n"), "-", false))
	if items[0].ID == items[1].ID {
		t.Error("two lines share an id")
	}
}

func TestParseSizeAndStreamName(t *testing.T) {
	if w, h, err := ParseSize("32x24"); w != 32 || h != 24 || err != nil {
		t.Errorf("ParseSize(32x24) = %d, %d, %v", w, h, err)
	}
	for _, bad := range []string{"32", "x24", "0x4", "32x-1", "100000x100000"} {
		if _, _, err := ParseSize(bad); !errors.Is(err, ErrRawSize) {
			t.Errorf("ParseSize(%q): %v, want ErrRawSize", bad, err)
		}
	}
	for in, want := range map[string]string{"-": "stdin", "/v/clip.y4m": "clip", "frames/": "frames", ".y4m": ".y4m"} {
		if got := StreamName(in); got != want {
			t.Errorf("StreamName(%q) = %q, want %q", in, got, want)
		}
	}
}
