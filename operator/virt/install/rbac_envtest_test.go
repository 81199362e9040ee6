package install

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The user-facing roles deployed, against a real API server
// with RBAC: a user bound to kubevirt.io:view reads VMs but can neither
// create one nor open a console; kubevirt.io:edit can do both. (The API
// server authorizes before it routes, so a console request is refused or
// let through by RBAC alone: with no virt-api behind it here, a request
// that passes gets 404.)
func TestUserRolesEnvtest(t *testing.T) {
	cfg, admin := apiserver.Start(t)
	ctx := context.Background()
	const ns = "users"
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for _, r := range UserRoles() {
		require.NoError(t, admin.Create(ctx, r))
	}
	bind := func(user, role string) {
		require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}))
		apiserver.WaitAllowed(t, admin, authzv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: v1.GroupName, Resource: "virtualmachines"}})
	}
	bind("viewer", "kubevirt.io:view")
	bind("editor", "kubevirt.io:edit")

	as := func(user string) (client.Client, *rest.Config) {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(c, client.Options{Scheme: admin.Scheme()})
		require.NoError(t, err)
		return cl, c
	}
	g := resource.MustParse("64Mi")
	vm := func(name string) *v1.VirtualMachine {
		return &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.VirtualMachineSpec{
			RunStrategy: ptr.To(v1.RunStrategyHalted),
			Template:    &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}}},
		}}
	}
	// sub requests a subresource as the config's user (a websocket
	// upgrade is a GET: RBAC verb get; reset and softreboot are PUTs:
	// update) and returns the HTTP status.
	sub := func(c *rest.Config, method, path string) int {
		hc, err := rest.HTTPClientFor(c)
		require.NoError(t, err)
		req, err := http.NewRequest(method, c.Host+"/apis/"+v1.SubresourceGroupName+"/v1/namespaces/"+ns+"/"+path, nil)
		require.NoError(t, err)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	console := func(c *rest.Config) int { return sub(c, http.MethodGet, "virtualmachineinstances/vm/console") }

	viewer, viewerCfg := as("viewer")
	editor, editorCfg := as("editor")

	require.NoError(t, editor.Create(ctx, vm("vm")), "an editor creates VMs")
	assert.NoError(t, viewer.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm"}, &v1.VirtualMachine{}), "a viewer reads them")
	err := viewer.Create(ctx, vm("viewers"))
	assert.True(t, apierrors.IsForbidden(err), "a viewer cannot create a VM: %v", err)

	assert.Equal(t, http.StatusForbidden, console(viewerCfg), "a viewer cannot open a console")
	assert.Equal(t, http.StatusNotFound, console(editorCfg), "an editor's console request passes authorization (no virt-api here to serve it)")

	_, stranger := as("stranger")
	assert.Equal(t, http.StatusForbidden, console(stranger), "nor can a user with no role")

	// The same for resetting, rebooting, forwarding ports and vsock
	// streams, as KubeVirt's edit role grants them.
	for _, r := range []struct{ method, path string }{
		{http.MethodPut, "virtualmachineinstances/vm/reset"},
		{http.MethodPut, "virtualmachineinstances/vm/softreboot"},
		{http.MethodGet, "virtualmachineinstances/vm/portforward/22"},
		{http.MethodGet, "virtualmachineinstances/vm/portforward/22/tcp"},
		{http.MethodGet, "virtualmachines/vm/portforward/22"},
		{http.MethodGet, "virtualmachineinstances/vm/vsock?port=1234&tls=false"},
	} {
		assert.Equal(t, http.StatusForbidden, sub(viewerCfg, r.method, r.path), "a viewer: %s %s", r.method, r.path)
		assert.Equal(t, http.StatusForbidden, sub(stranger, r.method, r.path), "a stranger: %s %s", r.method, r.path)
		assert.Equal(t, http.StatusNotFound, sub(editorCfg, r.method, r.path), "an editor: %s %s", r.method, r.path)
	}
	// What the guest agent reports, viewers read too; freezing is an
	// editor's.
	for _, name := range []string{"guestosinfo", "userlist", "filesystemlist"} {
		assert.Equal(t, http.StatusNotFound, sub(viewerCfg, http.MethodGet, "virtualmachineinstances/vm/"+name), "a viewer may read %s", name)
		assert.Equal(t, http.StatusForbidden, sub(stranger, http.MethodGet, "virtualmachineinstances/vm/"+name), "a stranger may not read %s", name)
	}
	for _, name := range []string{"freeze", "unfreeze"} {
		assert.Equal(t, http.StatusForbidden, sub(viewerCfg, http.MethodPut, "virtualmachineinstances/vm/"+name), "a viewer may not %s", name)
		assert.Equal(t, http.StatusNotFound, sub(editorCfg, http.MethodPut, "virtualmachineinstances/vm/"+name), "an editor may %s", name)
	}
}
