package daemon

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A checkpoint file is
//
//	magic    "SMTDCKPT"         8 bytes
//	format   uint32 LE          CheckpointFormat
//	length   uint64 LE          bytes of body
//	body     gob(Checkpoint)
//	crc      uint32 LE          CRC-32C (Castagnoli) of body
//
// A file of another format version, truncated, or whose CRC does not match
// is refused as a whole.
const (
	checkpointMagic = "SMTDCKPT"
	// CheckpointFormat is the version of the checkpoint file format.
	CheckpointFormat = 1
)

// ErrCheckpoint is wrapped by every error about a checkpoint that cannot
// be read or does not fit the configured pipeline.
var ErrCheckpoint = errors.New("smtd: bad checkpoint")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checkpoint is everything needed to continue a pipeline exactly where it
// was: parameters, optimiser and schedule state (in the model sections),
// the random source, the config it was trained with, and the last applied
// sequence of its input.
type Checkpoint struct {
	Pipeline     string
	Modality     string
	ModelVersion uint64 // minibatches applied
	Samples      int64  // valid messages applied
	Created      time.Time
	Config       []byte // the pipeline's config as YAML
	Input        string // input subject
	Stream       string // JetStream stream, empty for core NATS
	// StreamCreated is when Stream was created: with its name, the
	// identity of the stream instance LastSeq counts in (zero in
	// checkpoints of core NATS pipelines and of older smtd versions).
	StreamCreated time.Time
	LastSeq       uint64 // last applied stream sequence (0: none)
	RNG           []byte // the PCG state (math/rand/v2)
	Sections      []Section
	// Counters are the pipeline's counters when the checkpoint was
	// written; they continue from there after a restore.
	Counters CounterState
	// Epoch is the lease epoch of the cluster owner that wrote it (0
	// outside cluster mode): a checkpoint of an epoch older than the
	// latest pointer's, past the pointer's version, was written by an
	// owner that had lost its lease, and is never restored.
	Epoch uint64
}

// CounterState is the part of a pipeline's counters kept in checkpoints.
type CounterState struct {
	Received, Redelivered, Rejected, Learned, NotLearned int64
	Published, Rollbacks, Lost, Checkpoints              int64
	ByReason                                             map[string]int64
}

// encodeCheckpoint writes c in the checkpoint file format.
func encodeCheckpoint(w io.Writer, c *Checkpoint) error {
	var body bytes.Buffer
	if err := gob.NewEncoder(&body).Encode(c); err != nil {
		return fmt.Errorf("smtd: encoding checkpoint: %w", err)
	}
	var head [20]byte
	copy(head[:], checkpointMagic)
	binary.LittleEndian.PutUint32(head[8:], CheckpointFormat)
	binary.LittleEndian.PutUint64(head[12:], uint64(body.Len()))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], crc32.Checksum(body.Bytes(), castagnoli))
	for _, b := range [][]byte{head[:], body.Bytes(), tail[:]} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// DecodeCheckpoint reads a whole checkpoint file from data.
func DecodeCheckpoint(data []byte) (*Checkpoint, error) {
	if len(data) < 24 || string(data[:8]) != checkpointMagic {
		return nil, fmt.Errorf("%w: not a checkpoint file", ErrCheckpoint)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != CheckpointFormat {
		return nil, fmt.Errorf("%w: format version %d, this smtd reads %d", ErrCheckpoint, v, CheckpointFormat)
	}
	n := binary.LittleEndian.Uint64(data[12:])
	if n != uint64(len(data)-24) {
		return nil, fmt.Errorf("%w: body is %d bytes, header says %d (truncated?)", ErrCheckpoint, len(data)-24, n)
	}
	body := data[20 : 20+n]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[20+n:]) {
		return nil, fmt.Errorf("%w: CRC mismatch (corrupt file)", ErrCheckpoint)
	}
	var c Checkpoint
	if err := gob.NewDecoder(bytes.NewReader(body)).Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	return &c, nil
}

// ReadCheckpoint reads a checkpoint file.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := DecodeCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// checkpointName is the file (and object) name of a checkpoint; names sort
// in version order, and in cluster mode in epoch, then version order.
func checkpointName(pipeline string, epoch, version uint64) string {
	if epoch > 0 {
		return fmt.Sprintf("%s-e%016d-%016d.ckpt", pipeline, epoch, version)
	}
	return fmt.Sprintf("%s-%016d.ckpt", pipeline, version)
}

// writeCheckpointFile writes data atomically into dir: a temporary file,
// fsync, rename, fsync of the directory. It then removes all but the newest
// keep checkpoints of the pipeline.
func writeCheckpointFile(dir, name string, data []byte, keep int) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(f.Name(), path); err != nil {
		return "", err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	files, err := checkpointFiles(dir)
	if err != nil {
		return path, err
	}
	for len(files) > keep {
		os.Remove(files[0])
		files = files[1:]
	}
	return path, nil
}

// checkpointFiles lists the checkpoint files in dir, oldest first.
func checkpointFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".ckpt") && !strings.HasPrefix(e.Name(), ".") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(files)
	return files, nil
}
