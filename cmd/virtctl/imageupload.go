package main

// virtctl image-upload dv|pvc NAME --image-path=FILE [--size=SIZE] [flags]
//
// As KubeVirt's: creates the DataVolume (source.upload, size in
// spec.storage) or the PVC (annotated as an upload target) unless
// --no-create, waits for its upload server, asks the aggregated API
// upload.cdi.kubevirt.io for a token, sends the file to cdi-uploadproxy
// with a progress bar (stderr), and waits for the upload to be done.
//
// The upload proxy's URL is --uploadproxy-url, else the CDIConfig's
// spec.uploadProxyURLOverride, else its status.uploadProxyURL (upstream's
// order). An upload cut on the way (a proxy, the network) is sent again
// from the start, --retry times: the upload server keeps nothing of a
// cut upload.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	uploadv1 "github.com/kubevmm/kubevmm/api/cdi/upload/v1beta1"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

type imageUpload struct {
	kind, name, imagePath, size, uploadProxyURL, storageClass, accessMode, volumeMode string
	noCreate, insecure, blockVolume                                                   bool
	waitSecs, retries                                                                 uint
	pvcName, pvcSize                                                                  string // upstream's deprecated spellings
}

func (u *imageUpload) flags(fs *pflag.FlagSet) {
	fs.StringVar(&u.imagePath, "image-path", "", "Path to the local disk image (raw or qcow2; plain, gz or xz).")
	fs.StringVar(&u.size, "size", "", "The size of the DataVolume or PVC to create (10Gi, 500Mi).")
	fs.StringVar(&u.uploadProxyURL, "uploadproxy-url", "", "The URL of the cdi-uploadproxy service (default the CDIConfig's).")
	fs.StringVar(&u.storageClass, "storage-class", "", "The storage class of the PVC.")
	fs.StringVar(&u.accessMode, "access-mode", "", "The access mode of the PVC.")
	fs.StringVar(&u.volumeMode, "volume-mode", "", "The PVC's volume mode: block or filesystem (default the storage profile's).")
	fs.BoolVar(&u.noCreate, "no-create", false, "Upload into an existing DataVolume or PVC; create none.")
	fs.BoolVar(&u.insecure, "insecure", false, "Do not verify the upload proxy's certificate.")
	fs.UintVar(&u.waitSecs, "wait-secs", 300, "Seconds to wait for the upload server.")
	fs.UintVar(&u.retries, "retry", 5, "Times an upload cut on the way is sent again.")
	fs.StringVar(&u.pvcName, "pvc-name", "", "The PVC to create and upload into.")
	fs.StringVar(&u.pvcSize, "pvc-size", "", "The size of the PVC to create.")
	fs.BoolVar(&u.blockVolume, "block-volume", false, "The PVC's volume mode is block.")
	_ = fs.MarkDeprecated("pvc-name", "give pvc NAME as arguments instead.")
	_ = fs.MarkDeprecated("pvc-size", "use --size instead.")
	_ = fs.MarkDeprecated("block-volume", "use --volume-mode=block instead.")
	fs.String("archive-path", "", "Path to a local tar archive to unpack into the volume.")
	fs.Bool("force-bind", false, "Bind the PVC at once, not waiting for its first consumer.")
	fs.Bool("datasource", false, "Create a DataSource naming the DataVolume or PVC.")
	fs.String("default-instancetype", "", "The image's default instance type (a DataSource label).")
	fs.String("default-instancetype-kind", "", "The kind of the image's default instance type.")
	fs.String("default-preference", "", "The image's default preference (a DataSource label).")
	fs.String("default-preference-kind", "", "The kind of the image's default preference.")
	markUnsupported(fs, "archive-path", "force-bind", "datasource",
		"default-instancetype", "default-instancetype-kind", "default-preference", "default-preference-kind")
}

func (c *cli) imageUploadCommand() *cobra.Command {
	u := &imageUpload{}
	cmd := &cobra.Command{
		Use:   "image-upload",
		Short: "Upload a disk image into a DataVolume or PersistentVolumeClaim.",
		Example: `  # A new DataVolume 'fedora-dv' of 10Gi, filled with a local qcow2 image:
  virtctl image-upload dv fedora-dv --size=10Gi --image-path=/images/fedora.qcow2

  # An existing DataVolume that waits for an upload:
  virtctl image-upload dv fedora-dv --no-create --image-path=/images/fedora.qcow2

  # A new PVC, through a given upload proxy whose certificate is not checked:
  virtctl image-upload pvc fedora-pvc --size=10Gi --image-path=/images/fedora.qcow2 --uploadproxy-url=https://cdi-uploadproxy.mycluster.com --insecure`,
		RunE: runE(func(cmd *cobra.Command, args []string) (int, error) {
			if err := u.validate(args); err != nil {
				return 2, fmt.Errorf("image-upload: %w", err)
			}
			ac, err := c.apiClient()
			if err != nil {
				return 1, err
			}
			return ac.imageUpload(u, cmd.OutOrStdout())
		}),
	}
	u.flags(cmd.Flags())
	return cmd
}

// parseImageUpload parses image-upload's arguments as the command does.
func parseImageUpload(args []string) (*imageUpload, error) {
	u := &imageUpload{}
	fs := pflag.NewFlagSet("image-upload", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	u.flags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := unsupportedSet(fs); err != nil {
		return nil, err
	}
	return u, u.validate(fs.Args())
}

// validate checks the flags and reads the arguments, dv|pvc NAME.
func (u *imageUpload) validate(pos []string) error {
	switch {
	case u.pvcName != "" && len(pos) == 0:
		u.kind, u.name = "pvc", u.pvcName
	case u.pvcName == "" && len(pos) == 2 && (pos[0] == "dv" || pos[0] == "pvc"):
		u.kind, u.name = pos[0], pos[1]
	default:
		return errors.New("want dv|pvc NAME")
	}
	if u.pvcSize != "" {
		if u.size != "" && u.size != u.pvcSize {
			return errors.New("--pvc-size and --size disagree")
		}
		u.size = u.pvcSize
	}
	if u.imagePath == "" {
		return errors.New("--image-path is required")
	}
	if u.blockVolume {
		if u.volumeMode != "" && u.volumeMode != "block" {
			return fmt.Errorf("--block-volume and --volume-mode=%s disagree", u.volumeMode)
		}
		u.volumeMode = "block"
	}
	switch u.volumeMode {
	case "", "block", "filesystem":
	default:
		return fmt.Errorf("--volume-mode %q: want block or filesystem", u.volumeMode)
	}
	switch corev1.PersistentVolumeAccessMode(u.accessMode) {
	case "", corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
	default:
		return fmt.Errorf("--access-mode %q: want ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod", u.accessMode)
	}
	if u.size != "" {
		q, err := resource.ParseQuantity(u.size)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("--size %q: want a positive quantity (10Gi, 500Mi)", u.size)
		}
	} else if !u.noCreate {
		return errors.New("--size is required to create the " + strings.ToUpper(u.kind) + " (or --no-create)")
	}
	return nil
}

func (c *apiClient) imageUpload(u *imageUpload, stdout io.Writer) (int, error) {
	f, err := os.Open(u.imagePath)
	if err != nil {
		return 1, err
	}
	defer func() { _ = f.Close() }() // read-only
	st, err := f.Stat()
	if err != nil {
		return 1, err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), cdiv1.AddToScheme(scheme)); err != nil {
		return 1, err
	}
	k, err := client.New(c.cfg, client.Options{Scheme: scheme})
	if err != nil {
		return 1, err
	}
	ctx := context.Background()
	if err := u.ensureTarget(ctx, k, c.ns, stdout); err != nil {
		return 1, err
	}
	if err := u.waitReady(ctx, k, c.ns, stdout); err != nil {
		return 1, err
	}
	proxyURL, err := u.proxyURL(ctx, k)
	if err != nil {
		return 1, err
	}
	fmt.Fprintf(stdout, "Uploading data to %s\n", proxyURL)
	tok, err := c.uploadToken(ctx, u.name)
	if err != nil {
		return 1, err
	}
	for attempt := uint(0); ; attempt++ {
		err = u.send(ctx, proxyURL, tok, f, st.Size())
		if err == nil {
			break
		}
		var perm *permanentError
		if errors.As(err, &perm) || attempt >= u.retries {
			return 1, err
		}
		fmt.Fprintf(os.Stderr, "upload cut (%v): sending %s again from the start\n", err, u.imagePath)
		time.Sleep(time.Duration(attempt+1) * time.Second) // what cut it may pass
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 1, err
		}
		if err := u.waitReady(ctx, k, c.ns, io.Discard); err != nil {
			return 1, err
		}
		// A token lives 5 minutes: a retry after a long upload needs a new one.
		if tok, err = c.uploadToken(ctx, u.name); err != nil {
			return 1, err
		}
	}
	fmt.Fprintln(stdout, "Uploading data completed successfully, waiting for processing to complete, you can hit ctrl-c without interrupting the progress")
	if err := u.waitDone(ctx, k, c.ns); err != nil {
		return 1, err
	}
	fmt.Fprintf(stdout, "Uploading %s completed successfully\n", u.imagePath)
	return 0, nil
}

// ensureTarget creates the DataVolume or PVC, or checks the existing one
// takes an upload.
func (u *imageUpload) ensureTarget(ctx context.Context, k client.Client, ns string, stdout io.Writer) error {
	pvc := &corev1.PersistentVolumeClaim{}
	err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: u.name}, pvc)
	switch {
	case err == nil:
		if _, ok := pvc.Annotations[cdiv1.AnnUploadRequest]; !ok {
			if u.kind == "dv" || u.noCreate {
				return fmt.Errorf("PVC %s/%s is not an upload target", ns, u.name)
			}
			// A PVC of the user's own, made an upload target as upstream does.
			patch := client.MergeFrom(pvc.DeepCopy())
			if pvc.Annotations == nil {
				pvc.Annotations = map[string]string{}
			}
			pvc.Annotations[cdiv1.AnnUploadRequest] = ""
			if err := k.Patch(ctx, pvc, patch); err != nil {
				return fmt.Errorf("making PVC %s/%s an upload target: %w", ns, u.name, err)
			}
		}
		if pvc.Annotations[cdiv1.AnnPodPhase] == string(corev1.PodSucceeded) {
			return fmt.Errorf("PVC %s/%s already has its upload", ns, u.name)
		}
		fmt.Fprintf(stdout, "Using existing PVC %s/%s\n", ns, u.name)
		return nil
	case !apierrors.IsNotFound(err):
		return err
	case u.noCreate:
		return fmt.Errorf("PVC %s/%s not found (--no-create)", ns, u.name)
	}
	var res corev1.VolumeResourceRequirements
	res.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(u.size)}
	var sc *string
	if u.storageClass != "" {
		sc = &u.storageClass
	}
	var modes []corev1.PersistentVolumeAccessMode
	if u.accessMode != "" {
		modes = []corev1.PersistentVolumeAccessMode{corev1.PersistentVolumeAccessMode(u.accessMode)}
	}
	var vm *corev1.PersistentVolumeMode
	switch u.volumeMode {
	case "block":
		m := corev1.PersistentVolumeBlock
		vm = &m
	case "filesystem":
		m := corev1.PersistentVolumeFilesystem
		vm = &m
	}
	meta := metav1.ObjectMeta{Name: u.name, Namespace: ns}
	if u.kind == "dv" {
		dv := &cdiv1.DataVolume{ObjectMeta: meta, Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}},
			Storage: &cdiv1.StorageSpec{AccessModes: modes, Resources: res, StorageClassName: sc, VolumeMode: vm}}}
		if err := k.Create(ctx, dv); err != nil {
			return fmt.Errorf("creating DataVolume %s/%s: %w", ns, u.name, err)
		}
		fmt.Fprintf(stdout, "DataVolume %s/%s created\n", ns, u.name)
		return nil
	}
	if modes == nil {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	meta.Annotations = map[string]string{cdiv1.AnnUploadRequest: ""}
	pvc = &corev1.PersistentVolumeClaim{ObjectMeta: meta, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: modes, Resources: res, StorageClassName: sc, VolumeMode: vm}}
	if err := k.Create(ctx, pvc); err != nil {
		return fmt.Errorf("creating PVC %s/%s: %w", ns, u.name, err)
	}
	fmt.Fprintf(stdout, "PersistentVolumeClaim %s/%s created\n", ns, u.name)
	return nil
}

// poll calls f every second until it is done or fails, for at most d.
func poll(ctx context.Context, d time.Duration, what string, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ok, err := f()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}

// waitReady waits for the PVC's upload server (the upload controller
// marks the PVC storage.pod.ready).
func (u *imageUpload) waitReady(ctx context.Context, k client.Client, ns string, stdout io.Writer) error {
	said := false
	return poll(ctx, time.Duration(u.waitSecs)*time.Second, "the upload server of PVC "+ns+"/"+u.name, func() (bool, error) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: u.name}, pvc); err != nil {
			return false, client.IgnoreNotFound(err) // the DataVolume's PVC comes a moment later
		}
		if err := u.dvFailed(ctx, k, ns); err != nil {
			return false, err
		}
		if pvc.Annotations[cdiv1.AnnPodReady] == "true" {
			return true, nil
		}
		if !said {
			fmt.Fprintf(stdout, "Waiting for PVC %s upload pod to be ready...\n", u.name)
			said = true
		}
		return false, nil
	})
}

func (u *imageUpload) dvFailed(ctx context.Context, k client.Client, ns string) error {
	if u.kind != "dv" {
		return nil
	}
	dv := &cdiv1.DataVolume{}
	if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: u.name}, dv); err != nil {
		return fmt.Errorf("DataVolume %s/%s: %w", ns, u.name, err)
	}
	if dv.Status.Phase == cdiv1.Failed {
		return fmt.Errorf("DataVolume %s/%s failed", ns, u.name)
	}
	return nil
}

// waitDone waits for the DataVolume to be Succeeded (the PVC's upload
// pod Succeeded for a bare PVC).
func (u *imageUpload) waitDone(ctx context.Context, k client.Client, ns string) error {
	return poll(ctx, 10*time.Minute, "the upload to "+ns+"/"+u.name+" to complete", func() (bool, error) {
		if u.kind == "dv" {
			if err := u.dvFailed(ctx, k, ns); err != nil {
				return false, err
			}
			dv := &cdiv1.DataVolume{}
			if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: u.name}, dv); err != nil {
				return false, err
			}
			return dv.Status.Phase == cdiv1.Succeeded, nil
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: u.name}, pvc); err != nil {
			return false, err
		}
		return pvc.Annotations[cdiv1.AnnPodPhase] == string(corev1.PodSucceeded), nil
	})
}

func (u *imageUpload) proxyURL(ctx context.Context, k client.Client) (string, error) {
	url := u.uploadProxyURL
	if url == "" {
		cfg := &cdiv1.CDIConfig{}
		if err := k.Get(ctx, types.NamespacedName{Name: "config"}, cfg); err != nil {
			return "", fmt.Errorf("no --uploadproxy-url and no CDIConfig to read it from: %w", err)
		}
		switch {
		case cfg.Spec.UploadProxyURLOverride != nil && *cfg.Spec.UploadProxyURLOverride != "":
			url = *cfg.Spec.UploadProxyURLOverride
		case cfg.Status.UploadProxyURL != nil && *cfg.Status.UploadProxyURL != "":
			url = *cfg.Status.UploadProxyURL
		default:
			return "", errors.New("the CDIConfig names no upload proxy URL: pass --uploadproxy-url")
		}
	}
	if !strings.Contains(url, "://") {
		url = "https://" + url
	}
	return strings.TrimSuffix(url, "/"), nil
}

// uploadToken asks cdi-apiserver, through the API server, for a token.
func (c *apiClient) uploadToken(ctx context.Context, pvc string) (string, error) {
	req := uploadv1.UploadTokenRequest{TypeMeta: metav1.TypeMeta{Kind: "UploadTokenRequest", APIVersion: uploadv1.GroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: "token-for-" + pvc, Namespace: c.ns}, Spec: uploadv1.UploadTokenRequestSpec{PvcName: pvc}}
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("%s/apis/%s/namespaces/%s/%s", strings.TrimSuffix(c.cfg.Host, "/"), uploadv1.GroupVersion, c.ns, uploadv1.Resource)
	b, err := c.do(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return "", fmt.Errorf("upload token: %w", err)
	}
	var resp uploadv1.UploadTokenRequest
	if err := json.Unmarshal(b, &resp); err != nil || resp.Status.Token == "" {
		return "", fmt.Errorf("upload token: no token in the answer (%v)", err)
	}
	return resp.Status.Token, nil
}

// permanentError is an upload the proxy refused: sending it again would
// not help.
type permanentError struct{ error }

func (e *permanentError) Unwrap() error { return e.error }

// send posts the file to the proxy's synchronous path: the answer comes
// once the image is on the volume, so a corrupt image's reason comes with
// it.
func (u *imageUpload) send(ctx context.Context, proxyURL, tok string, f *os.File, size int64) error {
	prog := newProgress(os.Stderr, size)
	defer prog.finish()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL+"/v1beta1/upload", io.NopCloser(&progressReader{r: f, p: prog}))
	if err != nil {
		return &permanentError{err}
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/octet-stream")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// #nosec G402 -- --insecure is the user's explicit choice.
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: u.insecure, MinVersion: tls.VersionTLS12}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read side
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return fmt.Errorf("upload proxy: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	default:
		return &permanentError{fmt.Errorf("upload proxy: %s: %s", resp.Status, strings.TrimSpace(string(msg)))}
	}
}

// progress shows how much of the file is sent: a bar redrawn in place on
// a terminal, a line per 10% otherwise (logs).
type progress struct {
	w         io.Writer
	total     int64
	done      atomic.Int64
	tty       bool
	lastShown int64
	stop      chan struct{}
	stopped   chan struct{}
}

func newProgress(w *os.File, total int64) *progress {
	return startProgress(w, total, term.IsTerminal(int(w.Fd())))
}

func startProgress(w io.Writer, total int64, tty bool) *progress {
	p := &progress{w: w, total: max(total, 1), tty: tty, lastShown: -1, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.show()
				return
			case <-t.C:
				p.show()
			}
		}
	}()
	return p
}

func (p *progress) show() {
	n := p.done.Load()
	pct := n * 100 / p.total
	if p.tty {
		const width = 40
		fill := int(pct * width / 100)
		fmt.Fprintf(p.w, "\r[%s%s] %3d%% %.1f / %.1f MiB", strings.Repeat("=", fill), strings.Repeat(" ", width-fill), pct,
			float64(n)/(1<<20), float64(p.total)/(1<<20))
		return
	}
	if step := pct / 10 * 10; step > p.lastShown {
		p.lastShown = step
		fmt.Fprintf(p.w, "%d%%\n", step)
	}
}

func (p *progress) finish() {
	close(p.stop)
	<-p.stopped
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.done.Add(int64(n))
	return n, err
}
