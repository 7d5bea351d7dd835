package kubelet

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

const logsPath = "/containerLogs/tenant-a/vm-a/macos"

// TestLogsFollow: a followed log reaches the client line by line, as the
// VM writes it, and the Guests' read ends when the client goes.
func TestLogsFollow(t *testing.T) {
	next, ended := make(chan struct{}), make(chan error, 1)
	g := &fakeGuests{logs: func(ctx context.Context, inst *computev1alpha1.MacOSInstance, o LogOptions, w io.Writer) error {
		if !o.Follow || inst.UID != uidA {
			return errors.New("not followed")
		}
		if _, err := io.WriteString(w, "line 1\n"); err != nil {
			return err
		}
		select {
		case <-next:
		case <-ctx.Done():
			ended <- ctx.Err()
			return ctx.Err()
		}
		if _, err := io.WriteString(w, "line 2\n"); err != nil {
			return err
		}
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	}}
	ts := newTestServer(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := ts.get(t, ctx, logsPath+"?follow=true", adminToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "line 1\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	// The second line is written only now: it is read as it comes.
	close(next)
	if line, err := r.ReadString('\n'); err != nil || line != "line 2\n" {
		t.Fatalf("second line %q, %v", line, err)
	}
	_ = resp.Body.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the read ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Guests' read did not end when the client went")
	}
}

// TestLogsOptions: the kubelet's query reaches the Guests, checked, and
// limitBytes cuts the log.
func TestLogsOptions(t *testing.T) {
	got := make(chan LogOptions, 1)
	g := &fakeGuests{logs: func(_ context.Context, _ *computev1alpha1.MacOSInstance, o LogOptions, w io.Writer) error {
		got <- o
		for range 3 {
			if _, err := io.WriteString(w, "0123456789\n"); err != nil {
				return err
			}
		}
		return nil
	}}
	ts := newTestServer(t, g)
	ctx := context.Background()

	before := time.Now()
	resp := ts.get(t, ctx, logsPath+"?tailLines=5&timestamps=true&sinceSeconds=60", adminToken)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != strings.Repeat("0123456789\n", 3) {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	o := <-got
	if o.Follow || o.TailLines == nil || *o.TailLines != 5 || !o.Timestamps || o.LimitBytes != nil || o.SinceTime == nil ||
		o.SinceTime.Before(before.Add(-61*time.Second)) || o.SinceTime.After(time.Now().Add(-59*time.Second)) {
		t.Fatalf("options %+v", o)
	}

	since := "2026-01-02T03:04:05Z"
	resp = ts.get(t, ctx, logsPath+"?limitBytes=15&tail=all&sinceTime="+url.QueryEscape(since), adminToken)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "0123456789\n0123" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	o = <-got
	if o.TailLines != nil || o.LimitBytes == nil || *o.LimitBytes != 15 || o.SinceTime == nil || o.SinceTime.Format(time.RFC3339) != since {
		t.Fatalf("options %+v", o)
	}
}

// TestLogsRefused: a bad query is a 400 that says what is wrong, before
// any VM is asked; a VM that is not this node's, or not running, is
// refused with its message; a Guests' error before any output is a 500
// with it. Each has a control that is served.
func TestLogsRefused(t *testing.T) {
	g := &fakeGuests{logs: func(_ context.Context, _ *computev1alpha1.MacOSInstance, o LogOptions, w io.Writer) error {
		if o.Timestamps {
			return errors.New("the guest agent does not answer")
		}
		_, err := io.WriteString(w, "booted\n")
		return err
	}}
	ts := newTestServer(t, g)
	cases := []struct {
		name, path, control string
		code                int
		msg                 string
	}{
		{"negative tailLines", logsPath + "?tailLines=-1", logsPath + "?tailLines=0", 400, "tailLines must be 0 or more, not -1"},
		{"tailLines not a number", logsPath + "?tailLines=ten", logsPath + "?tailLines=10", 400, `tailLines="ten" is not an integer`},
		{"negative tail", logsPath + "?tail=-3", logsPath + "?tail=3", 400, "tailLines must be 0 or more, not -3"},
		{"zero limitBytes", logsPath + "?limitBytes=0", logsPath + "?limitBytes=100", 400, "limitBytes must be greater than 0, not 0"},
		{"negative limitBytes", logsPath + "?limitBytes=-5", logsPath + "?limitBytes=7", 400, "limitBytes must be greater than 0, not -5"},
		{"previous", logsPath + "?previous=true", logsPath + "?previous=false", 400, "no previous VM log kept: a MacRack VM has one log, of its current boot"},
		{"follow not a boolean", logsPath + "?follow=maybe", logsPath + "?follow=false", 400, `follow="maybe" is not true or false`},
		{"zero sinceSeconds", logsPath + "?sinceSeconds=0", logsPath + "?sinceSeconds=1", 400, "sinceSeconds must be greater than 0, not 0"},
		{"sinceTime and sinceSeconds", logsPath + "?sinceSeconds=5&sinceTime=2026-01-02T03:04:05Z", logsPath + "?sinceTime=2026-01-02T03:04:05Z", 400,
			"at most one of sinceTime or sinceSeconds may be given"},
		{"sinceTime not RFC 3339", logsPath + "?sinceTime=yesterday", logsPath + "?sinceTime=2026-01-02T03:04:05Z", 400, `sinceTime="yesterday" is not an RFC 3339 time`},
		{"a stream of its own", logsPath + "?stream=Stderr", logsPath + "?stream=All", 400, "a MacRack VM has one log: stream=Stderr is not served, only All"},
		// 400, not the kubelet's 404: the API server replaces a 404's text.
		{"forged pod", "/containerLogs/tenant-a/vm-forged/macos", logsPath, 400, "no MacRack VM tenant-a/vm-forged on node mini1"},
		{"wrong container", "/containerLogs/tenant-a/vm-a/sidecar", logsPath, 400, `container "sidecar" not found in MacRack VM tenant-a/vm-a: its one container is "macos"`},
		{"stopped VM", "/containerLogs/tenant-a/vm-s/macos", logsPath, 400, "instance tenant-a/vm-s is Stopped: logs need a running VM"},
		{"Guests' error", logsPath + "?timestamps=true", logsPath + "?timestamps=false", 500, "the guest agent does not answer"},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := g.called()
			resp := ts.get(t, ctx, c.path, adminToken)
			if body := strings.TrimSpace(readAll(t, resp)); resp.StatusCode != c.code || body != c.msg {
				t.Fatalf("%d %q; want %d %q", resp.StatusCode, body, c.code, c.msg)
			}
			if c.code == http.StatusBadRequest && strings.Contains(c.path, "?") && g.called() != calls {
				t.Fatal("a bad query reached the Guests")
			}
			resp = ts.get(t, ctx, c.control, adminToken)
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "booted\n" {
				t.Fatalf("control: %d %q", resp.StatusCode, body)
			}
		})
	}
}
