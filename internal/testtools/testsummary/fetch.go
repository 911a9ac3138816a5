package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// goTool runs the go command in dir with env; the zero value runs it here
// with this process's environment.
type goTool struct {
	dir string
	env []string
}

func (g goTool) command(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = g.dir, g.env
	return cmd
}

// output runs go with args and returns its standard output; an error
// carries what go printed on standard error.
func (g goTool) output(args ...string) ([]byte, error) {
	cmd := g.command(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// module is a module path at a version.
type module struct {
	Path, Version string
}

// fetchModules downloads the modules go.mod requires that the module
// cache lacks, parallel at a time, and prints a line for each as it
// arrives, so that a first run shows what it waits for instead of a
// silent go test. These are the modules `go mod download` fetches: since
// go 1.17 go.mod names every module that provides a package the module's
// code or tests import. A module that cannot be fetched is reported and
// the run goes on: go test says whether it needs it.
func fetchModules(w io.Writer, tool goTool, parallel int, now func() time.Time) error {
	required, err := requiredModules(tool)
	if err != nil {
		return err
	}
	out, err := tool.output("env", "GOMODCACHE")
	if err != nil {
		return err
	}
	cache := strings.TrimSpace(string(out))
	var missing []module
	for _, m := range required {
		if !inModuleCache(cache, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		fmt.Fprintf(w, "modules: all %d that go.mod requires are in the module cache (%s)\n", len(required), cache)
		return nil
	}
	fmt.Fprintf(w, "modules: %d of the %d that go.mod requires are not in the module cache (%s); fetching them, %d at a time:\n",
		len(missing), len(required), cache, parallel)
	begin := now()
	jobs := make(chan module)
	results := make(chan fetched)
	for range parallel {
		go func() {
			for m := range jobs {
				results <- fetch(tool, m, now)
			}
		}()
	}
	go func() {
		for _, m := range missing {
			jobs <- m
		}
		close(jobs)
	}()
	width := len(fmt.Sprint(len(missing)))
	var size int64
	var failed int
	for i := range missing {
		r := <-results
		if r.err != nil {
			failed++
			fmt.Fprintf(w, "  [%*d/%d] %s %s: not fetched: %v\n", width, i+1, len(missing), r.Path, r.Version, r.err)
			continue
		}
		size += r.size
		fmt.Fprintf(w, "  [%*d/%d] %s %s: %s in %s\n", width, i+1, len(missing), r.Path, r.Version, byteSize(r.size), r.took.Round(100*time.Millisecond))
	}
	close(results)
	fmt.Fprintf(w, "modules: fetched %d (%s) in %s", len(missing)-failed, byteSize(size), now().Sub(begin).Round(100*time.Millisecond))
	if failed > 0 {
		fmt.Fprintf(w, "; %d could not be fetched (go test will say if it needs them)", failed)
	}
	fmt.Fprintln(w)
	return nil
}

// fetched is the outcome of one module's download.
type fetched struct {
	module
	size int64 // of its zip
	took time.Duration
	err  error
}

// fetch downloads m into the module cache (go mod download).
func fetch(tool goTool, m module, now func() time.Time) fetched {
	start := now()
	r := fetched{module: m}
	out, err := tool.output("mod", "download", "-json", m.Path+"@"+m.Version)
	var info struct{ Zip, Error string }
	if jsonErr := json.Unmarshal(out, &info); jsonErr == nil && info.Error != "" {
		r.err = fmt.Errorf("%s", info.Error)
	} else if err != nil {
		r.err = err
	} else if st, err := os.Stat(info.Zip); err == nil {
		r.size = st.Size()
	}
	r.took = now().Sub(start)
	return r
}

// requiredModules are the modules go.mod requires, as its replace
// directives change them; one replaced by a directory is left out, as
// there is nothing to fetch.
func requiredModules(tool goTool) ([]module, error) {
	out, err := tool.output("mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var gomod struct {
		Require []module
		Replace []struct{ Old, New module }
	}
	if err := json.Unmarshal(out, &gomod); err != nil {
		return nil, fmt.Errorf("go mod edit -json: %v", err)
	}
	var mods []module
	for _, m := range gomod.Require {
		for _, r := range gomod.Replace {
			if r.Old.Path == m.Path && (r.Old.Version == "" || r.Old.Version == m.Version) {
				m = r.New
			}
		}
		if m.Version != "" {
			mods = append(mods, m)
		}
	}
	return mods, nil
}

// inModuleCache reports whether m is extracted in the module cache, as a
// build needs it: its directory is there and no ".partial" file says the
// extraction was cut short.
func inModuleCache(cache string, m module) bool {
	dir := filepath.Join(cache, escapeModule(m.Path)+"@"+escapeModule(m.Version))
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false
	}
	_, err := os.Stat(dir + ".partial")
	return os.IsNotExist(err)
}

// escapeModule spells a module path or version as the module cache does on
// case-insensitive file systems: each upper-case letter becomes "!" and
// the letter in lower case.
func escapeModule(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// byteSize is n in B, kB or MB.
func byteSize(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
