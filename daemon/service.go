package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/dataset"
)

// addService registers the NATS micro service: an embed endpoint per
// pipeline, and the reload, checkpoint and status endpoints. `nats micro
// info smtd` lists them with their subjects; `nats micro stats smtd` shows
// per-endpoint request counts, errors and processing time.
func (d *Daemon) addService() (micro.Service, error) {
	svc, err := micro.AddService(d.nc, micro.Config{
		Name:        d.cfg.Service.Name,
		Version:     Version,
		Description: "smtd: streaming representation learning (sparse manifold transform)",
		// `nats micro stats` shows the pipelines' health too.
		StatsHandler: d.endpointStats,
	})
	if err != nil {
		return nil, fmt.Errorf("smtd: micro service: %w", err)
	}
	if d.qnc, err = d.connect("smtd-queries"); err != nil {
		svc.Stop()
		return nil, err
	}
	d.queries = newQueryPool(d.qnc, d.log, d.pipelines, d.cfg.Service.QueryWorkers, d.cfg.Service.QueryQueue)
	for _, pl := range d.pipelines {
		if err := svc.AddEndpoint("embed-"+pl.cfg.Name, d.queries.handler(pl, embedQuery),
			micro.WithEndpointSubject(d.cfg.EmbedSubject(pl.cfg.Name)),
			micro.WithEndpointMetadata(map[string]string{"pipeline": pl.cfg.Name, "modality": string(pl.cfg.Modality)}),
		); err != nil {
			svc.Stop()
			return nil, err
		}
		if pl.cfg.Modality != config.Text || pl.cfg.SMT.Dim == 0 {
			continue
		}
		if err := svc.AddEndpoint("neighbours-"+pl.cfg.Name, d.queries.handler(pl, neighboursQuery),
			micro.WithEndpointSubject(d.cfg.NeighboursSubject(pl.cfg.Name)),
			micro.WithEndpointMetadata(map[string]string{"pipeline": pl.cfg.Name}),
		); err != nil {
			svc.Stop()
			return nil, err
		}
	}
	endpoints := []struct {
		name, subject string
		h             micro.HandlerFunc
	}{
		{"reload", d.cfg.Subject("control.reload"), d.handleReload},
		{"checkpoint", d.cfg.Subject("control.checkpoint"), d.handleCheckpoint},
		{"status", d.cfg.Subject("status"), d.handleStatus},
		{"pipelines", d.cfg.Subject("pipelines"), d.handlePipelines},
	}
	if c := d.cluster; c != nil {
		// Any daemon answers the shared subjects; these reach this one.
		endpoints = append(endpoints, []struct {
			name, subject string
			h             micro.HandlerFunc
		}{
			{"reload-" + c.self.Name, d.cfg.Subject("control.reload." + c.self.Name), d.handleReload},
			{"checkpoint-" + c.self.Name, d.checkpointSubject(c.self.Name), d.handleCheckpoint},
		}...)
	}
	for _, e := range endpoints {
		if err := svc.AddEndpoint(e.name, e.h, micro.WithEndpointSubject(e.subject)); err != nil {
			svc.Stop()
			return nil, err
		}
	}
	return svc, nil
}

// embed answers an embedding query from the pipeline's current snapshot,
// encoded with the worker's reader of it (see queryPool). The request
// is an input message (same headers and payload as on the input
// subject); the reply is an output message. Queries never train: the
// snapshot is an immutable copy of the model.
func (pl *pipeline) embed(encoders map[*pipeline]*encoder, h nats.Header, data []byte) queryReply {
	e := pl.snapshotEncoder(encoders)
	if e == nil {
		return errorReply("503", "model not ready")
	}
	snap := e.from
	s, err := decode(&snap.cfg, h, data)
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			return errorReply("400", ie.Reason+": "+ie.Detail)
		}
		return errorReply("400", err.Error())
	}
	o := e.model.encode([]sample{s})[0]
	o.version = snap.version
	m := encodeOutput(&snap.cfg, "", &o, e.reply)
	e.reply = m.Data
	if c := pl.d.cluster; c != nil {
		m.Header.Set(HeaderDaemon, c.self.Name)
	}
	return queryReply{data: m.Data, header: m.Header}
}

// NeighboursRequest is a nearest-word query; a plain-text request is the
// word itself.
type NeighboursRequest struct {
	Word string `json:"word"`
	// K is how many neighbours: default 10, at most 1000.
	K int `json:"k,omitempty"`
}

// NeighboursReply lists the words nearest to the query by the cosine of
// their embeddings, most similar first.
type NeighboursReply struct {
	Pipeline     string      `json:"pipeline"`
	ModelVersion uint64      `json:"model_version"`
	Word         string      `json:"word"`
	Neighbours   []Neighbour `json:"neighbours"`
}

// Neighbour is one word of a NeighboursReply.
type Neighbour struct {
	Word   string  `json:"word"`
	Cosine float64 `json:"cosine"`
}

// neighbours answers a nearest-word query from the pipeline's current
// snapshot (its last solve of the word embeddings, which nothing writes).
func (pl *pipeline) neighbours(data []byte) queryReply {
	var q NeighboursRequest
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &q); err != nil {
			return errorReply("400", "bad request: "+echo(err.Error()))
		}
	} else {
		q.Word = string(data)
	}
	if q.K == 0 {
		q.K = 10
	}
	tokens := dataset.Tokenize(q.Word)
	if len(tokens) != 1 || q.K < 1 || q.K > 1000 {
		return errorReply("400", fmt.Sprintf("want one word and k in 1..1000, got %s (%d tokens) and k %d", echo(q.Word), len(tokens), q.K))
	}
	snap := pl.acquire()
	if snap == nil {
		return errorReply("503", "model not ready")
	}
	defer snap.release()
	t, _ := snap.model.(*textModel)
	if t == nil {
		return errorReply("404", fmt.Sprintf("pipeline %s is a %s pipeline: only text pipelines have word neighbours", pl.name, snap.cfg.Modality))
	}
	if t.solved == nil {
		return errorReply("503", "no word embeddings yet")
	}
	sv := t.solved
	id, ok := sv.vocab.Lookup(tokens[0])
	if !ok || !sv.vectors.Used(id) {
		return errorReply("404", fmt.Sprintf("%s has no embedding (unseen, or seen fewer than text.min_count times)", echo(tokens[0])))
	}
	rep := NeighboursReply{Pipeline: snap.cfg.Name, ModelVersion: snap.version, Word: tokens[0], Neighbours: []Neighbour{}}
	for _, n := range sv.vectors.Neighbours(nil, []int{id}, q.K)[0] {
		rep.Neighbours = append(rep.Neighbours, Neighbour{Word: sv.vocab.Word(n.ID), Cosine: n.Cosine})
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return errorReply("500", err.Error())
	}
	return queryReply{data: body}
}

// ReloadResult says what a reload did.
type ReloadResult struct {
	ConfigVersion int      `json:"config_version"`
	Applied       []string `json:"applied,omitempty"`
	Refused       []string `json:"refused,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// ErrReloadRefused is returned when a reload changes fields that cannot
// change while the daemon runs.
var ErrReloadRefused = errors.New("smtd: reload refused")

// Reload applies a new configuration, all or nothing: data is the YAML of
// the whole new config, or empty to re-read the file the daemon was started
// with. The new config is validated first; if it changes any field that
// cannot change live, nothing is applied and the fields are named.
func (d *Daemon) Reload(ctx context.Context, data []byte) (*ReloadResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	res := &ReloadResult{ConfigVersion: d.configVersion}
	name := "<request>"
	if len(data) == 0 {
		if d.opts.ConfigPath == "" {
			return res, errors.New("smtd: reload: the daemon runs on the built-in config; send the whole YAML config in the request")
		}
		var err error
		if data, err = os.ReadFile(d.opts.ConfigPath); err != nil {
			return res, fmt.Errorf("smtd: reload: %w", err)
		}
		name = d.opts.ConfigPath
	}
	cfg, err := config.Parse(data, name)
	if err != nil {
		return res, fmt.Errorf("smtd: reload: invalid config, nothing applied:\n%w", err)
	}
	if d.opts.Override != nil {
		d.opts.Override(cfg)
	}
	live, refused := config.LiveChanges(d.cfg, cfg)
	if len(refused) > 0 {
		res.Refused = refused
		return res, fmt.Errorf("%w: these fields cannot change while the daemon runs: %s", ErrReloadRefused, strings.Join(refused, ", "))
	}
	if len(live) == 0 {
		return res, nil
	}
	for i, pl := range d.pipelines {
		r := tuneRequest{p: cfg.Pipelines[i], ckpt: cfg.Checkpoint, done: make(chan struct{})}
		select {
		case pl.tune <- r:
			<-r.done
		case <-pl.finished:
		case <-ctx.Done():
			// Pipelines before i have the new values: finish the job
			// rather than leave the daemon half reloaded.
			pl.tune <- r
			<-r.done
		}
	}
	d.opts.Logger.SetLevel(cfg.Log.Level)
	d.cfg = cfg
	d.configVersion++
	res.ConfigVersion, res.Applied = d.configVersion, live
	return res, nil
}

// reloadAndReport runs Reload and logs and publishes its outcome.
func (d *Daemon) reloadAndReport(ctx context.Context, data []byte) *ReloadResult {
	res, err := d.Reload(ctx, data)
	if err != nil {
		res.Error = err.Error()
		d.log.Error().Err(err).Strs("refused", res.Refused).Int("config_version", res.ConfigVersion).Msg("reload not applied")
	} else {
		d.log.Info().Strs("applied", res.Applied).Int("config_version", res.ConfigVersion).Msg("reload applied")
	}
	d.publishEvent("events.reload", res)
	return res
}

// ReloadFromFile re-reads the config file (on SIGHUP), logs and publishes
// the outcome.
func (d *Daemon) ReloadFromFile(ctx context.Context) {
	d.reloadAndReport(ctx, nil)
}

func (d *Daemon) handleReload(req micro.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := d.reloadAndReport(ctx, req.Data())
	if res.Error != "" {
		body, _ := json.Marshal(res)
		req.Error("400", firstLine(res.Error), body)
		return
	}
	req.RespondJSON(res)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// checkpointSubject is the checkpoint endpoint of one daemon of a cluster.
func (d *Daemon) checkpointSubject(daemon string) string {
	return d.fixed.Subject("control.checkpoint." + daemon)
}

// handleCheckpoint writes a checkpoint of every pipeline now, or of the one
// named in the request body. In cluster mode a pipeline another daemon
// owns is checkpointed by its owner: the request is passed on to it.
func (d *Daemon) handleCheckpoint(req micro.Request) {
	want := strings.TrimSpace(string(req.Data()))
	var infos []*checkpointInfo
	for _, pl := range d.pipelines {
		if want != "" && want != pl.name {
			continue
		}
		if c := d.cluster; c != nil && req.Subject() != d.checkpointSubject(c.self.Name) {
			if l := pl.lease.Load(); l == nil || l.Owner != c.self.Name {
				passed, err := d.passCheckpoint(pl.name, l)
				if err != nil {
					req.Error("503", err.Error(), nil)
					return
				}
				infos = append(infos, passed...)
				continue
			}
		}
		r := checkpointRequest{done: make(chan checkpointResult, 1)}
		select {
		case pl.ckptReq <- r:
		case <-pl.finished:
			req.Error("503", "shutting down", nil)
			return
		}
		res := <-r.done
		if res.err != nil {
			req.Error("500", res.err.Error(), nil)
			return
		}
		infos = append(infos, res.info)
	}
	if len(infos) == 0 {
		req.Error("404", "no pipeline "+echo(want), nil)
		return
	}
	req.RespondJSON(infos)
}

// passCheckpoint asks the owner l of a pipeline for its checkpoint.
func (d *Daemon) passCheckpoint(pipeline string, l *Lease) ([]*checkpointInfo, error) {
	if l == nil {
		return nil, fmt.Errorf("pipeline %s has no owner at the moment", pipeline)
	}
	msg, err := d.nc.Request(d.checkpointSubject(l.Owner), []byte(pipeline), 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("asking %s, the owner of %s: %v", l.Owner, pipeline, err)
	}
	if e := msg.Header.Get(micro.ErrorHeader); e != "" {
		return nil, fmt.Errorf("%s, the owner of %s: %s", l.Owner, pipeline, e)
	}
	var infos []*checkpointInfo
	if err := json.Unmarshal(msg.Data, &infos); err != nil {
		return nil, fmt.Errorf("%s, the owner of %s: %v", l.Owner, pipeline, err)
	}
	return infos, nil
}

// PipelineInfo is what a client needs to talk to a pipeline: its name,
// modality, subjects and image shape.
type PipelineInfo struct {
	Name     string `json:"name"`
	Modality string `json:"modality"`
	Input    string `json:"input"`
	Output   string `json:"output"`
	// Image is the shape the pipeline's images or frames must have (nil
	// for text), so that clients such as smtd feed can convert theirs.
	Image *ImageStatus `json:"image,omitempty"`
}

// pipelineInfo describes the pipeline of config p.
func pipelineInfo(p *config.Pipeline) PipelineInfo {
	info := PipelineInfo{Name: p.Name, Modality: string(p.Modality), Input: p.Input.Subject, Output: p.Output.Subject}
	if p.Modality != config.Text {
		info.Image = &ImageStatus{Width: p.Image.Width, Height: p.Image.Height, Channels: p.Image.Channels}
	}
	return info
}

// PipelinesReply is the reply of the pipelines endpoint (P.pipelines),
// which every role may ask: the pipelines' descriptions, none of their
// state.
type PipelinesReply struct {
	Version   string         `json:"version"`
	Pipelines []PipelineInfo `json:"pipelines"`
}

// Pipelines describes the daemon's pipelines, from the config it started
// with: none of these fields can change while it runs.
func (d *Daemon) Pipelines() PipelinesReply {
	r := PipelinesReply{Version: Version}
	for i := range d.fixed.Pipelines {
		r.Pipelines = append(r.Pipelines, pipelineInfo(&d.fixed.Pipelines[i]))
	}
	return r
}

func (d *Daemon) handlePipelines(req micro.Request) { req.RespondJSON(d.Pipelines()) }

// PipelineStatus is one pipeline's entry in the status reply.
type PipelineStatus struct {
	PipelineInfo
	ModelVersion uint64 `json:"model_version"`
	Health       Health `json:"health"`
	LastSeq      uint64 `json:"last_seq"`
	// Backlog is how many input messages wait to be learned.
	Backlog     uint64           `json:"backlog"`
	Received    int64            `json:"received"`
	Redelivered int64            `json:"redelivered"`
	Learned     int64            `json:"learned"`
	NotLearned  int64            `json:"not_learned"`
	Rejected    int64            `json:"rejected"`
	ByReason    map[string]int64 `json:"rejected_by_reason,omitempty"`
	Published   int64            `json:"published"`
	Lost        int64            `json:"lost"`
	Checkpoints int64            `json:"checkpoints"`
	Rollbacks   int64            `json:"rollbacks"`
	// Queries counts the embed and neighbours queries and their latency.
	Queries QueryStatus    `json:"queries"`
	Model   map[string]any `json:"model"`
	// In cluster mode: the daemon that owns the pipeline ("" while none
	// does) and its lease epoch, and whether the answering daemon is the
	// owner or a standby. A standby reports the owner's model version,
	// last sequence, backlog and health (from the lease), and the
	// counters and model of the newest checkpoint, which it serves.
	Owner string `json:"owner,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
	Role  string `json:"role,omitempty"`
	// ServedVersion is the model version this daemon answers queries
	// with.
	ServedVersion uint64 `json:"served_version"`
}

// ImageStatus is the image shape of a pipeline.
type ImageStatus struct {
	Width    int `json:"width"`
	Height   int `json:"height"`
	Channels int `json:"channels"`
}

// Status is the reply of the status endpoint.
type Status struct {
	Version       string `json:"version"`
	ConfigVersion int    `json:"config_version"`
	// JetStream says why the embedded server's JetStream is disabled
	// (its disk was full); empty while it runs.
	JetStream string           `json:"jetstream,omitempty"`
	Pipelines []PipelineStatus `json:"pipelines"`
	// Daemon is the answering daemon's name and Members the live daemons,
	// in cluster mode.
	Daemon  string   `json:"daemon,omitempty"`
	Members []Member `json:"members,omitempty"`
}

// Status reports every pipeline's counters and model.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	st := Status{Version: Version, ConfigVersion: d.configVersion}
	d.mu.Unlock()
	if why := d.storage.Load(); why != nil {
		st.JetStream = *why
	}
	if c := d.cluster; c != nil {
		st.Daemon, st.Members = c.self.Name, *c.live.Load()
	}
	for _, pl := range d.pipelines {
		c := pl.stats.state() // before the snapshot: see settle
		snap := pl.acquire()
		ps := PipelineStatus{
			PipelineInfo: pipelineInfo(&snap.cfg), Health: *pl.health.Load(),
			LastSeq: pl.stats.lastSeq.Load(), Backlog: pl.stats.backlog.Load(),
			Received: c.Received, Redelivered: c.Redelivered, Learned: c.Learned, NotLearned: c.NotLearned,
			Rejected: c.Rejected, ByReason: c.ByReason, Published: c.Published, Lost: c.Lost,
			Checkpoints: c.Checkpoints, Rollbacks: c.Rollbacks,
		}
		ps.ModelVersion = snap.version
		ps.ServedVersion = snap.version
		if c := d.cluster; c != nil {
			ps.Role = "standby"
			if l := pl.lease.Load(); l != nil {
				ps.Owner, ps.Epoch = l.Owner, l.Epoch
				if l.Owner == c.self.Name {
					ps.Role = "owner"
				} else {
					ps.ModelVersion, ps.LastSeq, ps.Backlog, ps.Health = l.ModelVersion, l.LastSeq, l.Backlog, l.Health
				}
			}
		}
		if d.queries != nil {
			ps.Queries = d.queries.stats[pl].status()
		}
		ps.Model = snap.model.describe()
		snap.release()
		st.Pipelines = append(st.Pipelines, ps)
	}
	return st
}

func (d *Daemon) handleStatus(req micro.Request) { req.RespondJSON(d.Status()) }
