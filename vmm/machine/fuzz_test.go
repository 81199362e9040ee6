package machine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
)

// fuzzable reports whether a VM described by a fuzzed configuration may be
// built here: disks, taps, vsock sockets and a SCSI controller's volumes
// (named in its device state) would open or create host files and
// devices named by the fuzzer, and a large VM only slows the
// fuzzer down. Those configurations are validated like any other; only
// building them is skipped.
func fuzzable(sc SavedConfig) bool {
	return validateConfig(&sc) != nil ||
		sc.CPUs <= 2 && sc.MemoryBytes <= 64<<20 && len(sc.Disks) == 0 && len(sc.NICs) == 0 && sc.Vsock == nil && !sc.SCSI
}

// fuzzSource is a migration source whose header and state are the
// fuzzer's; its RAM is never written, so no pages are sent.
type fuzzSource struct {
	mem           *memory.Guest
	header, state []byte
}

func (s *fuzzSource) Memory() *memory.Guest      { return s.mem }
func (s *fuzzSource) StartDirtyLog() error       { return nil }
func (s *fuzzSource) SyncDirty([][]uint64) error { return nil }
func (s *fuzzSource) StopDirtyLog() error        { return nil }
func (s *fuzzSource) Pause() error               { return nil }
func (s *fuzzSource) Resume()                    {}
func (s *fuzzSource) Throttle(float64)           {}
func (s *fuzzSource) Header() ([]byte, error)    { return s.header, nil }
func (s *fuzzSource) State() ([]byte, error)     { return s.state, nil }
func (s *fuzzSource) close()                     { s.mem.Close() }
func newFuzzSource(t testing.TB, h, st []byte) *fuzzSource {
	mem, err := memory.New([]memory.Layout{{GPA: 0, Size: memory.PageSize}})
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzSource{mem: mem, header: h, state: st}
}

// FuzzIncoming sends fuzzed migration headers and states, well framed, to
// migration.Receive with a real Incoming on /dev/kvm: whatever arrives,
// the target either holds a loaded machine or has discarded everything
// and reported an error.
func FuzzIncoming(f *testing.F) {
	_, header, state := savedVM(f)
	f.Add(header, state)
	for _, tc := range badStates {
		f.Add(header, edit(f, state, tc.edit))
	}
	f.Add(edit(f, header, func(h map[string]any) { h["cpus"] = 2 }), state)
	f.Fuzz(func(t *testing.T, header, state []byte) {
		var sc SavedConfig
		if json.Unmarshal(header, &sc) == nil && !fuzzable(sc) {
			t.Skip()
		}
		src, dst := migrationPipe(t)
		in := NewIncoming(Config{})
		received := make(chan error, 1)
		go func() {
			_, err := migration.Receive(context.Background(), dst, in)
			dst.Close()
			received <- err
		}()
		fs := newFuzzSource(t, header, state)
		defer fs.close()
		_, sendErr := migration.Send(context.Background(), src, fs, migration.Options{})
		src.Close()
		err := <-received
		if err == nil {
			if in.Machine == nil {
				t.Fatal("migration succeeded without a machine")
			}
			in.Machine.Close()
			return
		}
		if sendErr == nil {
			t.Fatalf("the target failed (%v) but the source committed", err)
		}
		if in.Machine != nil {
			t.Fatalf("failed migration left a machine behind: %v", err)
		}
	})
}

// FuzzRestoreSnapshot restores snapshots whose state.json is the fuzzer's
// (the memory file is a real one): a restore either gives a machine or
// an error.
func FuzzRestoreSnapshot(f *testing.F) {
	m, _, state := savedVM(f)
	good := f.TempDir()
	if _, err := snapshot.Write(good, m.Memory(), json.RawMessage(state)); err != nil {
		f.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(good, snapshot.ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(manifest)
	for _, tc := range badStates {
		f.Add(edit(f, manifest, func(man map[string]any) { tc.edit(man["state"].(map[string]any)) }))
	}
	f.Fuzz(func(t *testing.T, manifest []byte) {
		var man struct {
			State struct {
				Config SavedConfig `json:"config"`
			} `json:"state"`
		}
		if json.Unmarshal(manifest, &man) == nil && !fuzzable(man.State.Config) {
			t.Skip()
		}
		dir := t.TempDir()
		if err := os.Link(filepath.Join(good, snapshot.MemoryFile), filepath.Join(dir, snapshot.MemoryFile)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, snapshot.ManifestFile), manifest, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Restore(dir, Config{})
		if (r == nil) == (err == nil) {
			t.Fatalf("restore gave machine %v and error %v", r != nil, err)
		}
		if r != nil {
			r.Close()
		}
	})
}
