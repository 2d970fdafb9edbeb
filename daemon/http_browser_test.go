package daemon

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser returns the path of a local Chromium or Chrome. Without one the
// test is skipped, unless SMTD_REQUIRE_BROWSER is set (as in CI, which
// installs Chromium): then it fails.
func browser(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("SMTD_REQUIRE_BROWSER") != "" {
		t.Fatal("no chromium, chromium-browser, google-chrome or headless-shell on PATH, and SMTD_REQUIRE_BROWSER is set")
	}
	t.Skip("no chromium on PATH (apt-get install chromium); set SMTD_REQUIRE_BROWSER=1 to fail instead")
	return ""
}

// The live page in a real headless browser: after its script ran, the
// rendered DOM shows the pipeline's counters advancing while it learns,
// and the atom sheet is an <img> whose source follows the model version
// and which the browser decoded.
func TestLivePageInBrowser(t *testing.T) {
	path := browser(t)
	p := digitsPipeline("digits", "browser.images", 16)
	d := startDaemon(t, observedConfig(t, p))
	nc := connect(t, d.ClientURL())

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+d.HTTPAddr()+"/")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}

	// shown is what the rendered page shows of the pipeline, read by
	// script from the DOM.
	type shown struct {
		Learned string `json:"learned"`
		Version string `json:"version"`
		Src     string `json:"src"`
		Loaded  bool   `json:"loaded"`
	}
	const readDOM = `(() => {
		const el = document.querySelector("#p-digits");
		const img = el.querySelector("img.atoms");
		return {
			learned: el.querySelector('[data-field="learned"]').textContent,
			version: el.querySelector('[data-field="model_version"]').textContent,
			src: img.src,
			loaded: img.complete && img.naturalWidth > 0,
		};
	})()`
	read := func() shown {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[shown](readDOM))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return s
	}
	number := func(s string) int { n, _ := strconv.Atoi(s); return n }
	// until polls the rendered page until cond holds.
	until := func(what string, cond func(shown) bool) shown {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			s := read()
			if cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page never showed %s; it shows %+v", what, s)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	msgs := readStream(t, "mnist-train-1000.smtdrec")
	publishAll(t, nc, p.Input.Subject, msgs[:300])
	waitFor(t, time.Minute, "first images learned", func() bool { return pipelineStatus(d, "digits").Learned == 300 })
	first := until("300 learned and the atoms of that model", func(s shown) bool {
		return number(s.Learned) == 300 && s.Loaded && s.Src != "" && number(s.Version) > 0
	})
	publishAll(t, nc, p.Input.Subject, msgs[300:600])
	waitFor(t, time.Minute, "more images learned", func() bool { return pipelineStatus(d, "digits").Learned == 600 })
	second := until("the counters and the atoms advance", func(s shown) bool {
		return number(s.Learned) == 600 && number(s.Version) > number(first.Version) && s.Src != first.Src && s.Loaded
	})
	t.Logf("page showed %+v, then %+v", first, second)
}
