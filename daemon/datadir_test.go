package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smtd/smtd/config"
)

// An unusable data_dir stops Start at once with an error naming the
// directory and what is wrong with it, before any server is started.
func TestStartDataDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(base, "read-only")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir   string
		wantProblem string // empty: Start succeeds
		rootCanDo   bool   // the check cannot fail for root
	}{
		{name: "existing", dir: filepath.Join(base, "ok")},
		{name: "created", dir: filepath.Join(base, "new", "nested")},
		{name: "regular file", dir: file, wantProblem: "is not a directory (a regular file)"},
		{name: "under a file", dir: filepath.Join(file, "data"), wantProblem: "is under " + file + ", which is not a directory"},
		{name: "nested under a file", dir: filepath.Join(file, "a", "b"), wantProblem: "is under " + file + ", which is not a directory"},
		{name: "read-only", dir: readOnly, wantProblem: "is not writable", rootCanDo: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootCanDo && os.Geteuid() == 0 {
				t.Skip("root writes to read-only directories")
			}
			cfg := testConfig(t, config.DefaultPipeline(config.Image, "images"))
			cfg.DataDir = tc.dir
			d, err := New(cfg, Options{Logger: NewLogger(testWriter{t}, "console")})
			if err != nil {
				t.Fatal(err)
			}
			err = d.Start(context.Background())
			if tc.wantProblem == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				d.Shutdown(context.Background())
				if fi, err := os.Stat(tc.dir); err != nil || !fi.IsDir() {
					t.Errorf("data_dir not created: %v", err)
				}
				return
			}
			var de *DataDirError
			if !errors.As(err, &de) {
				t.Fatalf("Start error %v (%T), want a *DataDirError", err, err)
			}
			if de.Dir != tc.dir || !strings.Contains(err.Error(), tc.dir) || !strings.Contains(err.Error(), tc.wantProblem) {
				t.Errorf("error %q, want it to name %s and say %q", err, tc.dir, tc.wantProblem)
			}
			if d.server != nil {
				t.Error("the embedded server was started")
			}
		})
	}
}
