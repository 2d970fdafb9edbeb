package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
)

// ContributionLoad drives the owner of a pipeline in worker mode as fast
// as it takes contributions, to measure how many images one owner merges
// per second when no worker keeps it waiting (smtd bench cluster): on a
// machine with a few cores, the workers that would saturate an owner
// cannot all run, but their contributions can be replayed.
//
// It first records contributions that real workers send (listening on
// <prefix>.work.<pipeline>.done beside the owner, which alone answers
// them), then asks the owner for tasks as a worker does and answers each
// with one of the recorded contributions, in turn, under the task's id,
// epoch and version. The owner applies them as any contribution; the
// model it learns from copies is no model to keep, but every step costs
// what a worker's would: the same bytes to receive, decode, check and
// merge.
type ContributionLoad struct {
	nc      *nats.Conn
	subject func(what string) string
	sub     *nats.Subscription

	mu       sync.Mutex
	recorded []recordedContribution // newest last, at most loadKeep
}

type recordedContribution struct {
	data   []byte
	images int
}

// loadKeep is how many recorded contributions ContributionLoad keeps.
const loadKeep = 32

// RecordContributions starts recording the contributions that workers
// send to the owner of pipeline, on nc, with the subjects of cfg. Only
// contributions of an image pipeline whose dictionary is past its
// seeding are kept (those carrying its first rows are few and cost the
// owner otherwise); Replay
// answers a task with one of as many images as the task has messages.
func RecordContributions(nc *nats.Conn, cfg *config.Config, pipeline string) (*ContributionLoad, error) {
	l := &ContributionLoad{nc: nc, subject: func(what string) string { return cfg.Subject("work." + pipeline + "." + what) }}
	var asm assembly
	sub, err := nc.Subscribe(l.subject("done"), func(m *nats.Msg) {
		whole := asm.add(m)
		if whole == nil {
			return
		}
		var meta workMeta
		if json.Unmarshal([]byte(whole.Header.Get(headerWork)), &meta) != nil || meta.Images == 0 {
			return
		}
		var c imageContribution
		if c.decode(whole.Data) != nil || len(c.km.Seeds) > 0 {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.recorded) == loadKeep {
			l.recorded = l.recorded[1:]
		}
		l.recorded = append(l.recorded, recordedContribution{whole.Data, meta.Images})
	})
	if err != nil {
		return nil, err
	}
	l.sub = sub
	return l, nc.Flush()
}

// Recorded returns how many contributions are recorded.
func (l *ContributionLoad) Recorded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recorded)
}

// Replay stops recording and then, from workers goroutines, asks the
// owner for tasks and answers each with a recorded contribution, until
// ctx is done. Each goroutine has one contribution in flight, as a
// worker has, and waits for the owner's receipt before it asks again. It
// returns the images of the contributions the owner received, and an
// error if nothing was recorded or a contribution could not be sent.
func (l *ContributionLoad) Replay(ctx context.Context, workers int) (int64, error) {
	l.sub.Unsubscribe()
	l.mu.Lock()
	recorded := l.recorded
	l.mu.Unlock()
	if len(recorded) == 0 {
		return 0, errors.New("smtd: no contribution recorded to replay")
	}
	// The contributions of each size, for the tasks of that many
	// messages.
	bySize := map[int][]recordedContribution{}
	for _, c := range recorded {
		bySize[c.images] = append(bySize[c.images], c)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		images int64
		next   int
		failed error
	)
	for i := range workers {
		wg.Go(func() {
			name := fmt.Sprintf("load-%d", i)
			for ctx.Err() == nil {
				t, err := requestTask(ctx, l.nc, l.subject("task"), name)
				if err != nil {
					// No owner (yet): ask again shortly, not in a
					// busy loop.
					sleep(ctx, 10*time.Millisecond)
					continue
				}
				if t == nil {
					continue // no task now: ask again
				}
				fit := bySize[len(t.Seqs)]
				if len(fit) == 0 {
					fit = recorded
				}
				mu.Lock()
				c := fit[next%len(fit)]
				next++
				mu.Unlock()
				meta := workMeta{Task: t.ID, Epoch: t.Epoch, Daemon: name, Version: t.Version, Received: int64(len(t.Seqs)), Images: c.images}
				// The receipt of the contribution in flight when ctx is done counts.
				err = deliver(context.WithoutCancel(ctx), l.nc, l.subject("done"), &meta, c.data)
				mu.Lock()
				switch {
				case err == nil:
					images += int64(c.images)
				case ctx.Err() == nil:
					failed = cmp.Or(failed, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return images, failed
}
