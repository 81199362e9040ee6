// Command cdi-importer fills a PVC from an http(s) image or with a blank
// image (storage/cdi/importer), configured by the environment the import
// controller sets. It serves its progress on :8443/metrics while it runs,
// and ends with a termination message: "Import Complete", or the error
// (exit status 1; the kubelet restarts it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/storage/cdi/importer"
)

const terminationLog = "/dev/termination-log"

func main() {
	// `cdi-importer install DIR`: the init container of a node-pulled
	// registry import copies this (static) binary into the emptyDir from
	// which the containerDisk image's container runs it.
	if len(os.Args) == 3 && os.Args[1] == "install" {
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "cdi-importer install:", err)
			os.Exit(1)
		}
		return
	}
	err := run()
	msg := "Import Complete"
	if err != nil {
		msg = err.Error()
		fmt.Fprintln(os.Stderr, "cdi-importer:", err)
	} else {
		fmt.Println("cdi-importer:", msg)
	}
	if werr := os.WriteFile(terminationLog, []byte(msg), 0o600); werr != nil && !errors.Is(werr, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "cdi-importer: writing the termination message:", werr)
	}
	if err != nil {
		os.Exit(1)
	}
}

func run() error {
	o, err := options()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(importer.MetricsPort))
	if err != nil {
		return fmt.Errorf("serving metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", importer.MetricsHandler(o.Progress, os.Getenv(importer.EnvOwnerUID)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends with the process
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return importer.Run(ctx, o)
}

// options reads the environment and the mounted Secrets and ConfigMap.
func options() (importer.Options, error) {
	o := importer.Options{Source: os.Getenv(importer.EnvSource), URL: os.Getenv(importer.EnvEndpoint), Checksum: os.Getenv(importer.EnvChecksum),
		AccessKey: os.Getenv(importer.EnvAccessKey), SecretKey: os.Getenv(importer.EnvSecretKey),
		DataDir: importer.DataDir, BlockPath: importer.BlockPath, ScratchDir: importer.ScratchDir, Progress: &importer.Progress{},
		Registry: importer.RegistryOptions{PullMethod: os.Getenv(importer.EnvRegistryPullMethod),
			Architecture: os.Getenv(importer.EnvRegistryArchitecture), DiskDir: importer.RegistryDiskDir}}
	var err error
	if o.Size, err = strconv.ParseInt(os.Getenv(importer.EnvImageSize), 10, 64); err != nil || o.Size <= 0 {
		return o, fmt.Errorf("%s=%q: want a positive byte count", importer.EnvImageSize, os.Getenv(importer.EnvImageSize))
	}
	if v := os.Getenv(importer.EnvOverhead); v != "" {
		if o.Overhead, err = strconv.ParseFloat(v, 64); err != nil || o.Overhead < 0 || o.Overhead >= 1 {
			return o, fmt.Errorf("%s=%q: want a fraction in [0, 1)", importer.EnvOverhead, v)
		}
	}
	if h := os.Getenv(importer.EnvExtraHeaders); h != "" {
		if err := json.Unmarshal([]byte(h), &o.Headers); err != nil {
			return o, fmt.Errorf("%s: %w", importer.EnvExtraHeaders, err)
		}
	}
	// A Secret's and a ConfigMap's keys are files (skipping the kubelet's
	// ..data links and directories).
	files := func(glob string) ([][]byte, error) {
		names, err := filepath.Glob(glob)
		if err != nil {
			return nil, err
		}
		var out [][]byte
		for _, n := range names {
			if strings.HasPrefix(filepath.Base(n), "..") {
				continue
			}
			if st, err := os.Stat(n); err != nil || st.IsDir() {
				continue
			}
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		return out, nil
	}
	hs, err := files(filepath.Join(importer.SecretHeadersDir, "*", "*"))
	if err != nil {
		return o, fmt.Errorf("secretExtraHeaders: %w", err)
	}
	for _, h := range hs {
		o.Headers = append(o.Headers, strings.TrimSpace(string(h)))
	}
	if o.CAs, err = files(filepath.Join(importer.CertDir, "*")); err != nil {
		return o, fmt.Errorf("certConfigMap: %w", err)
	}
	return o, nil
}

// install copies this executable into dir.
func install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }() // read only
	dst := filepath.Join(dir, filepath.Base(self))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		_ = out.Close()
		return fmt.Errorf("copying to %s: %w", dst, err)
	}
	return out.Close()
}
