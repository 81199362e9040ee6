// Command pause is the pod sandbox ("infra") container of the dev cluster:
// it holds the pod's namespaces and sleeps until told to stop. Kubernetes'
// own pause image lives in a registry we cannot reach, so cluster-up builds
// this one with hack/image and points containerd's sandbox_image at it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the pod it also reaps orphans: children of exited
	// processes in the shared PID namespace get re-parented here.
	signal.Notify(sig, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		return
	}
}
