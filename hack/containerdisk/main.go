// Command containerdisk builds a containerDisk image from a disk image
// file (raw or qcow2) and pushes it to a registry, without Docker: one
// layer holding disk/<name> owned 107:107 (KubeVirt's and CDI's layout),
// an OCI manifest. It prints the pushed manifest's digest.
//
//	go run ./hack/containerdisk -ca $KUBEVMM_CACHE/k8s/cluster/pki/ca.crt \
//	    guest.qcow2 docker://10.200.0.1:5000/kubevmm/guest:v1
//
// Credentials, if the registry wants them, come from the environment
// (REGISTRY_USERNAME, REGISTRY_PASSWORD), not the command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kubevmm/kubevmm/storage/cdi/registry"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "containerdisk:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("containerdisk", flag.ContinueOnError)
	name := fs.String("name", "", "the disk's file name in the image (default: the file's own)")
	ca := fs.String("ca", "", "PEM CA certificate the registry's is signed by (besides the system's)")
	insecure := fs.Bool("insecure", false, "skip TLS verification (plain http if the registry speaks it)")
	arch := fs.String("arch", "amd64", "the image's architecture")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: containerdisk [flags] FILE docker://HOST[:PORT]/REPO[:TAG]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errors.New("want a disk file and a docker:// reference")
	}
	file, url := fs.Arg(0), fs.Arg(1)
	if !strings.HasPrefix(url, "docker://") {
		url = "docker://" + url
	}
	ref, err := registry.ParseURL(url)
	if err != nil {
		return err
	}
	if *name == "" {
		*name = filepath.Base(file)
	}
	o := registry.Options{Insecure: *insecure, Architecture: *arch,
		Username: os.Getenv("REGISTRY_USERNAME"), Password: os.Getenv("REGISTRY_PASSWORD")}
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			return fmt.Errorf("-ca: %w", err)
		}
		o.CAs = [][]byte{pem}
	}
	c, err := registry.New(o)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := c.PushContainerDisk(ctx, ref, *name, f)
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", ref.Host+"/"+ref.Repo, d)
	return nil
}
