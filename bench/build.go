package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// goBuild is one `go build` the run needs, done at most once, on first use,
// into a temporary directory of its own that Run removes at its end.
type goBuild struct {
	once sync.Once
	dir  string
	err  error
}

// build runs `go build` of pkgs in the module at srcDir into b's directory,
// the first time it is called; every call returns that directory or the first
// call's error. what names the build in the progress line and errors.
func (b *goBuild) build(ctx context.Context, cfg Config, what, srcDir string, pkgs ...string) (string, error) {
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "stageq-bench-bin-")
		if err != nil {
			b.err = fmt.Errorf("%s: bin dir: %w", what, err)
			return
		}
		b.dir = dir
		cfg.progress("building %s in %s", what, srcDir)
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
		cmd.Dir = srcDir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s in %s: %w: %s", what, srcDir, err, lastLine(out))
		}
	})
	return b.dir, b.err
}

// remove deletes what the build wrote, if it ran.
func (b *goBuild) remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// binary returns the path of a stageq command (enqueue, worker), building them
// all once from SourceDir unless BinDir has them.
func (r *runner) binary(ctx context.Context, name string) (string, error) {
	if r.cfg.BinDir != "" {
		p := filepath.Join(r.cfg.BinDir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("binary %s: %w", name, err)
		}
		return p, nil
	}
	dir, err := r.stageqBin.build(ctx, r.cfg, "./cmd/enqueue and ./cmd/worker", r.cfg.SourceDir, "./cmd/enqueue", "./cmd/worker")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// riverBinary returns River's CLI, building it once from the bench/river module
// unless RiverBin names one.
func (r *runner) riverBinary(ctx context.Context) (string, error) {
	if r.cfg.RiverBin != "" {
		if _, err := os.Stat(r.cfg.RiverBin); err != nil {
			return "", fmt.Errorf("river binary: %w", err)
		}
		return r.cfg.RiverBin, nil
	}
	mod := filepath.Join(r.cfg.SourceDir, "bench", "river")
	dir, err := r.riverBin.build(ctx, r.cfg, "River's CLI (github.com/riverqueue/river/cmd/river)", mod, "github.com/riverqueue/river/cmd/river")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "river"), nil
}
