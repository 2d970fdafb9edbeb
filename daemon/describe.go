package daemon

import (
	"fmt"
	"math/rand/v2"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/smtd/smtd/config"
)

// Summary is what `smtd inspect` prints of a checkpoint.
type Summary struct {
	Pipeline     string         `json:"pipeline"`
	Modality     string         `json:"modality"`
	ModelVersion uint64         `json:"model_version"`
	Samples      int64          `json:"samples"`
	Created      time.Time      `json:"created"`
	Input        string         `json:"input"`
	Stream       string         `json:"stream,omitempty"`
	LastSeq      uint64         `json:"last_seq"`
	Sections     map[string]int `json:"section_bytes"`
	Model        map[string]any `json:"model"`
	Config       string         `json:"config"`
}

// checkpointModel restores the model of a checkpoint under the config it
// was written with, as the daemon would (its random source is never
// drawn from: the model only describes and draws itself).
func checkpointModel(c *Checkpoint) (model, error) {
	var p config.Pipeline
	if err := yaml.Unmarshal(c.Config, &p); err != nil {
		return nil, fmt.Errorf("%w: its config: %v", ErrCheckpoint, err)
	}
	m := newModel(&p, rand.NewPCG(0, 0))
	if err := m.restore(c.Sections); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	return m, nil
}

// Describe restores the model of a checkpoint, exactly as the daemon would,
// and summarises it.
func Describe(c *Checkpoint) (*Summary, error) {
	m, err := checkpointModel(c)
	if err != nil {
		return nil, err
	}
	s := &Summary{
		Pipeline: c.Pipeline, Modality: c.Modality, ModelVersion: c.ModelVersion, Samples: c.Samples,
		Created: c.Created, Input: c.Input, Stream: c.Stream, LastSeq: c.LastSeq,
		Sections: map[string]int{}, Model: m.describe(), Config: string(c.Config),
	}
	for _, sec := range c.Sections {
		s.Sections[sec.Name] = len(sec.Data)
	}
	return s, nil
}
