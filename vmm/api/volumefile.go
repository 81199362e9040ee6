package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Hot-plugging an image the VMM's process cannot open itself: in
// KubeVirt's layout the claim is published on the node for another pod
// (the attachment pod), which the launcher's mount namespace never sees,
// and only the node agent (virt-handler) can reach it. The agent opens
// the image and hands over the open descriptor on a unix socket
// (SCM_RIGHTS), one request per connection:
//
//	client: VolumeRequest as JSON (Path unused), with exactly one descriptor
//	server: VolumeFileReply as JSON, then closes
//
// The server attaches the image by the descriptor itself (a duplicate of
// it stays open until the volume is detached, DELETE
// /v1/vm/volumes/{name}); it never reopens it by a path, which for a
// block device its device cgroup may forbid, and never opens a path the
// client chose.

// VolumeFileReply answers a volume file request.
type VolumeFileReply struct {
	Volume *Volume `json:"volume,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// maxVolumeFileRequest bounds a request: a name, a format and a flag.
const maxVolumeFileRequest = 4096

// volumeFileTimeout bounds one exchange on the server side; the attach it
// does is a few image reads.
const volumeFileTimeout = time.Minute

// SendVolumeFile asks the server on c to attach the image open at f under
// req's name; c is used for this request only.
func SendVolumeFile(ctx context.Context, c *net.UnixConn, req VolumeRequest, f *os.File) (Volume, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	b, err := json.Marshal(VolumeRequest{Name: req.Name, Format: req.Format, ReadOnly: req.ReadOnly})
	if err != nil {
		return Volume{}, err
	}
	if _, _, err := c.WriteMsgUnix(b, unix.UnixRights(int(f.Fd())), nil); err != nil {
		return Volume{}, fmt.Errorf("sending volume %q: %w", req.Name, err)
	}
	_ = c.CloseWrite()
	var rep VolumeFileReply
	if err := json.NewDecoder(c).Decode(&rep); err != nil {
		return Volume{}, fmt.Errorf("volume %q: reading the answer: %w", req.Name, err)
	}
	switch {
	case rep.Error != "":
		return Volume{}, fmt.Errorf("volume %q: %s", req.Name, rep.Error)
	case rep.Volume == nil:
		return Volume{}, fmt.Errorf("volume %q: an empty answer", req.Name)
	}
	return *rep.Volume, nil
}

// AttachFile attaches the image open at f, and closes f: what is
// attached holds its own duplicate.
type AttachFile func(VolumeRequest, *os.File) (Volume, error)

// ServeVolumeFiles answers volume file requests on l until it is closed.
func ServeVolumeFiles(l *net.UnixListener, attach AttachFile) error {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go serveVolumeFile(c, attach)
	}
}

func serveVolumeFile(c *net.UnixConn, attach AttachFile) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(volumeFileTimeout))
	rep := VolumeFileReply{}
	v, err := receiveVolumeFile(c, attach)
	if err != nil {
		rep.Error = err.Error()
	} else {
		rep.Volume = &v
	}
	_ = json.NewEncoder(c).Encode(rep)
}

// receiveVolumeFile reads one request and its descriptor, checks both,
// and attaches.
func receiveVolumeFile(c *net.UnixConn, attach AttachFile) (Volume, error) {
	buf := make([]byte, maxVolumeFileRequest)
	oob := make([]byte, unix.CmsgSpace(4*4)) // room to see a sender that sent more than one
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return Volume{}, fmt.Errorf("reading the request: %w", err)
	}
	fds, err := parseRights(oob[:oobn])
	f := (*os.File)(nil)
	for i, fd := range fds {
		if i == 0 {
			f = os.NewFile(uintptr(fd), "hot-plugged volume")
			continue
		}
		_ = unix.Close(fd) // only the first is taken
	}
	switch {
	case err != nil:
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		err = errors.New("the request or its descriptors were cut short")
	case len(fds) != 1:
		err = fmt.Errorf("%d descriptors sent, one expected", len(fds))
	}
	var req VolumeRequest
	if err == nil {
		if jerr := json.Unmarshal(buf[:n], &req); jerr != nil {
			err = fmt.Errorf("the request: %w", jerr)
		}
	}
	if err == nil && req.Name == "" {
		err = errors.New(`a volume needs a "name"`)
	}
	if err == nil {
		err = checkVolumeFile(f)
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return Volume{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return attach(req, f)
}

// parseRights is the descriptors an SCM_RIGHTS message carried.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("the request's control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		r, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

// checkVolumeFile accepts a regular file or a block device: an image.
func checkVolumeFile(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("the descriptor: %w", err)
	}
	if m := st.Mode & unix.S_IFMT; m != unix.S_IFREG && m != unix.S_IFBLK {
		return fmt.Errorf("the descriptor is no regular file nor block device (mode %#o)", m)
	}
	return nil
}
