package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// startEmulatorProcess starts command (with the listen flags and the bench
// queue added) as a child process, waits for the line in which it says
// where it listens, and arranges for it to be stopped at close.
func (t *target) startEmulatorProcess(ctx context.Context, command []string) (string, error) {
	args := append(append([]string{}, command[1:]...),
		"--no-delivery", "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--queue", Queue)
	cmd := exec.Command(command[0], args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("bench: start the emulator (%s): %w", strings.Join(command, " "), err)
	}
	t.closeFns = append(t.closeFns, func() error {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	const prefix = "Cloud Tasks emulator listening on "
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("bench: the emulator (%s) exited before saying where it listens", strings.Join(command, " "))
			}
			if addr, found := strings.CutPrefix(line, prefix); found {
				go func() { // keep draining, so the child never blocks on a full pipe
					for range lines {
					}
				}()
				return addr, nil
			}
		case <-timeout.C:
			return "", fmt.Errorf("bench: the emulator (%s) did not say where it listens within 30s", strings.Join(command, " "))
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
