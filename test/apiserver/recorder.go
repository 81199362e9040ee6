package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Recorder is a controller's client (the real one: every call goes
// through) that keeps the writes made with it, in order, and the object
// versions its reads returned: a test's view of what the controller did,
// in which order, and whether it has seen a change yet.
type Recorder struct {
	client.Client
	mu     sync.Mutex
	writes []write
	read   map[string]bool
}

type write struct{ name, what string }

// NewRecorder records c's calls.
func NewRecorder(c client.Client) *Recorder {
	return &Recorder{Client: c, read: map[string]bool{}}
}

func (r *Recorder) note(verb string, obj client.Object, err error) {
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, write{obj.GetName(), fmt.Sprintf("%s %T %s", verb, obj, obj.GetName())})
}

// Create records a created object.
func (r *Recorder) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := r.Client.Create(ctx, obj, opts...)
	r.note("create", obj, err)
	return err
}

// Update records an updated object.
func (r *Recorder) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := r.Client.Update(ctx, obj, opts...)
	r.note("update", obj, err)
	return err
}

// Patch records a patched object.
func (r *Recorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := r.Client.Patch(ctx, obj, patch, opts...)
	r.note("patch", obj, err)
	return err
}

// Delete records a deleted object.
func (r *Recorder) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	err := r.Client.Delete(ctx, obj, opts...)
	r.note("delete", obj, err)
	return err
}

// Get records the version of the object read.
func (r *Recorder) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := r.Client.Get(ctx, key, obj, opts...)
	if err == nil {
		r.mu.Lock()
		r.read[version(obj)] = true
		r.mu.Unlock()
	}
	return err
}

func version(obj client.Object) string {
	return fmt.Sprintf("%T %s/%s@%s", obj, obj.GetNamespace(), obj.GetName(), obj.GetResourceVersion())
}

// Writes are the writes so far, each "verb *type name" (e.g. "create
// *v1.Pod importer-disk"), those of the objects named names only when
// names are given.
func (r *Recorder) Writes(names ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, w := range r.writes {
		if len(names) == 0 || slices.Contains(names, w.name) {
			out = append(out, w.what)
		}
	}
	return out
}

// Seen says whether a read returned obj at its resourceVersion: the
// controller has had it in hand.
func (r *Recorder) Seen(obj client.Object) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read[version(obj)]
}
