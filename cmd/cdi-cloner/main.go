// Command cdi-cloner is the clone source pod's program: it streams the
// source claim's image to the target's upload server
// (storage/cdi/clone.Send) and serves its progress, as the importer does,
// for the DataVolume controller to read.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/storage/cdi/clone"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-cloner:", err)
		os.Exit(1)
	}
}

func run() error {
	var url, certDir, dir, device, owner string
	var serverName string
	flag.StringVar(&url, "url", "", "the target's upload server (https://ADDRESS:PORT)")
	flag.StringVar(&serverName, "server-name", "", "the name its certificate must carry (cdi-upload-<pvc>.<namespace>.svc)")
	flag.StringVar(&certDir, "cert-dir", "/etc/cdi-clone/certs", "tls.crt and tls.key of the client certificate, ca.crt of the server's")
	flag.StringVar(&dir, "source-dir", "", "the Filesystem source volume's directory (disk.img is read)")
	flag.StringVar(&device, "block-device", "", "the Block source volume's device")
	flag.StringVar(&owner, "owner-uid", "", "the target PVC's UID, the progress metric's label")
	flag.Parse()
	if url == "" {
		return errors.New("--url is required")
	}
	if (dir == "") == (device == "") {
		return errors.New("want one of --source-dir and --block-device")
	}
	tlsCfg, err := clone.ClientTLS(certDir+"/tls.crt", certDir+"/tls.key", certDir+"/ca.crt")
	if err != nil {
		return err
	}
	tlsCfg.ServerName = serverName
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	p := &importer.Progress{}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(importer.MetricsPort))
	if err != nil {
		return fmt.Errorf("the progress endpoint: %w", err)
	}
	metrics := &http.Server{Handler: importer.MetricsHandler(p, owner), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = metrics.Serve(ln) }()
	defer func() { _ = metrics.Close() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	src := clone.SourcePath(dir, device)
	log.Info("cloning", "source", src, "to", url)
	if err := clone.Send(ctx, src, url, tlsCfg, p); err != nil {
		return err
	}
	log.Info("clone done")
	return nil
}
