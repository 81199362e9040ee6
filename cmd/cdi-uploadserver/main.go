// Command cdi-uploadserver is CDI's upload server, run in pod
// cdi-upload-<pvc> by the upload controller (see storage/cdi/uploadserver):
// it takes one image from cdi-uploadproxy over mutual TLS, writes it to
// the PVC and exits 0, which marks the upload done.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/storage/cdi/uploadserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-uploadserver:", err)
		os.Exit(1)
	}
}

func run() error {
	var addr, certDir, clientName, scratch, dest, device string
	var size int64
	flag.StringVar(&addr, "listen", ":8443", "HTTPS address")
	flag.StringVar(&certDir, "cert-dir", "/etc/cdi-upload/certs", "tls.crt and tls.key of the serving certificate, ca.crt of the client's")
	flag.StringVar(&clientName, "client-name", "cdi-uploadproxy", "the common name the client certificate must carry")
	flag.StringVar(&scratch, "scratch", "/scratch", "where a qcow2 image is received before conversion")
	flag.StringVar(&dest, "dest", "", "the Filesystem volume's directory (disk.img is written there)")
	flag.StringVar(&device, "block-device", "", "the Block volume's device")
	flag.Int64Var(&size, "size", 0, "the usable size of a Filesystem volume in bytes")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	cfg := uploadserver.Config{Dest: dest, Size: size, ScratchDir: scratch, ClientName: clientName}
	switch {
	case (dest == "") == (device == ""):
		return errors.New("want one of --dest and --block-device")
	case device != "":
		n, err := deviceSize(device)
		if err != nil {
			return err
		}
		cfg = uploadserver.Config{Dest: device, Block: true, Size: n, ScratchDir: scratch, ClientName: clientName}
	case size <= 0:
		return fmt.Errorf("--size %d: want the usable size in bytes", size)
	}
	tlsCfg, err := uploadserver.TLSConfig(certDir+"/tls.crt", certDir+"/tls.key", certDir+"/ca.crt")
	if err != nil {
		return err
	}
	s := uploadserver.New(cfg, log)
	srv := &http.Server{Addr: addr, Handler: s.Handler(), TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("upload server ready", "addr", addr, "dest", cfg.Dest, "block", cfg.Block, "size", cfg.Size)
	if err := s.Serve(ctx, srv); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	select {
	case <-s.Done:
		log.Info("upload done, exiting")
		return nil
	default:
		return errors.New("stopped before an upload completed")
	}
}

// deviceSize is a block device's size: where its end is.
func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("block volume: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("block volume size: %w", err)
	}
	return n, nil
}
