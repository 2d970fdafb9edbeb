package daemon

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
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

// headless starts the browser at path, headless, for at most 3 minutes
// of the test.
func headless(t *testing.T, path string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
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

	ctx := headless(t, path)
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

// With password users, the browser asks for one when the page loads (here
// answered by the test, as a person would answer the prompt), and the
// page's own requests then carry it: an operator sees the counters move.
func TestLivePageInBrowserAsksForAUser(t *testing.T) {
	path := browser(t)
	s := startSecured(t)
	ctx := headless(t, path)
	// Listen's callback may not send commands: the requests the browser
	// pauses are answered from here.
	paused := make(chan any, 1024)
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev.(type) {
		case *fetch.EventAuthRequired, *fetch.EventRequestPaused:
			paused <- ev
		}
	}); err != nil {
		t.Fatal(err)
	}
	var prompts atomic.Int32
	go func() {
		// A failed answer leaves its request paused, and the page
		// short of the count below.
		for ev := range paused {
			switch ev := ev.(type) {
			case *fetch.EventAuthRequired:
				prompts.Add(1)
				chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{
					RequestID: ev.RequestID,
					AuthChallengeResponse: &fetch.AuthChallengeResponse{
						Response: fetch.AuthChallengeResponseResponseProvideCredentials,
						Username: "ops", Password: operatorPassword,
					},
				})
			case *fetch.EventRequestPaused:
				chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			}
		}
	}()
	handleAuth := true
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handleAuth}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+s.d.HTTPAddr()+"/")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	n := replayFile(t, s.producer(t).Conn, "mnist-raw-100.smtdrec", "mnist.images")
	want := strconv.Itoa(n)
	deadline := time.Now().Add(time.Minute)
	for {
		learned, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#p-digits [data-field="learned"]').textContent`))
		if err == nil && learned == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s learned (it shows %q, err %v)", want, learned, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Once answered, the browser sends the user with the page's own
	// requests (the script's, the stylesheet's, the atom pictures')
	// without being asked again.
	if n := prompts.Load(); n != 1 {
		t.Errorf("the browser was asked for a user %d times, want once", n)
	}
}
