package kubelet

import (
	"context"
	"strings"
	"testing"
)

// TestHealthzAndNotFound: healthz answers an authorized caller only, and
// anything the agent does not serve is a 404, after authorization.
func TestHealthzAndNotFound(t *testing.T) {
	ts := newTestServer(t, &fakeGuests{})
	ctx := context.Background()
	for _, c := range []struct {
		path, token string
		code        int
		body        string
	}{
		{"/healthz", adminToken, 200, "ok"},
		{"/healthz", getterToken, 200, "ok"},
		{"/healthz", "", 401, "Unauthorized"},
		{"/healthz", "nobody", 401, "Unauthorized"},
		{"/pods", getterToken, 404, "404 page not found: the MacRack agent serves exec, portForward, containerLogs and healthz only"},
		{"/run/tenant-a/vm-a/macos", adminToken, 404, "404 page not found: the MacRack agent serves exec, portForward, containerLogs and healthz only"},
		{"/portForward/tenant-a/vm-a/uid-a/extra", adminToken, 404, "404 page not found: the MacRack agent serves exec, portForward, containerLogs and healthz only"},
		{"/portForward/tenant-a/vm-a", getterToken, 403, "Forbidden (user=getter, verb=create, resource=nodes, subresource=proxy)"},
		{"/stats/summary", getterToken, 403, "Forbidden (user=getter, verb=get, resource=nodes, subresource=stats)"},
		{"/pods", "", 401, "Unauthorized"},
	} {
		resp := ts.get(t, ctx, c.path, c.token)
		if body := strings.TrimSpace(readAll(t, resp)); resp.StatusCode != c.code || body != c.body {
			t.Errorf("%s as %q: %d %q; want %d %q", c.path, c.token, resp.StatusCode, body, c.code, c.body)
		}
	}
}
