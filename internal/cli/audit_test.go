package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
)

// startNATS starts the real nats-server, with JetStream, on a free loopback
// port and a store of its own, for the test's life. It returns its URL.
func startNATS(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(repoRoot, "bin", "nats-server"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: `make nats` builds it (%v)", bin, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", filepath.Join(dir, "store"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("nats-server's log:\n%s", b)
			}
		}
	})
	url := "nats://127.0.0.1:" + port
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not listen on %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publish sends evs through the operator's JetStream sink.
func publish(t *testing.T, url, stream string, evs ...cloudevents.Event) {
	t.Helper()
	ctx := context.Background()
	sink, err := sink.NewJetStream(ctx, sink.JetStreamOptions{URL: url, Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	for _, ev := range evs {
		if err := sink.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// jetStreamOf is a JetStream context on the server at url, closed with
// the test.
func jetStreamOf(t *testing.T, url string) nats.JetStreamContext {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// publishCopy stores ev once more, on its type's subject under another
// message id: what an older operator, which published every record of a
// type on one subject, left when it re-sent a record past JetStream's
// duplicate window.
func publishCopy(t *testing.T, url string, ev cloudevents.Event) {
	t.Helper()
	js := jetStreamOf(t, url)
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(sink.SubjectPrefix+strings.TrimPrefix(ev.Type(), "io.macrack."), b, nats.MsgId(ev.ID()+"#late")); err != nil {
		t.Fatal(err)
	}
}

// streamLen is how many messages the stream stores.
func streamLen(t *testing.T, url, stream string) uint64 {
	t.Helper()
	js := jetStreamOf(t, url)
	info, err := js.StreamInfo(stream)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// tailLines is the text audit tail prints for evs, to the byte.
func tailLines(evs ...cloudevents.Event) string {
	typeW, subjW := len("TYPE"), len("SUBJECT")
	for _, ev := range evs {
		typeW, subjW = max(typeW, len(ev.Type())), max(subjW, len(ev.Subject()))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s  %-*s  %-*s  %s\n", "TIME", typeW, "TYPE", subjW, "SUBJECT", "ID")
	for _, ev := range evs {
		fmt.Fprintf(&b, "%-20s  %-*s  %-*s  %s\n", ev.Time().UTC().Format(time.RFC3339), typeW, ev.Type(), subjW, ev.Subject(), ev.ID())
	}
	return b.String()
}

func TestAuditTailAndBillingReportAgainstARealNATSServer(t *testing.T) {
	url := startNATS(t)
	evs := dayOfRecords(t)
	bound := evs[1] // tenant-a's a1 bound
	if bound.Type() != "io.macrack.lease.bound" {
		t.Fatalf("evs[1] is %s", bound.Type())
	}
	// The bound record is sent twice, as after a lost acknowledgement:
	// JetStream's duplicate window drops the second copy.
	publish(t, url, "", append(evs[:2:2], append([]cloudevents.Event{bound}, evs[2:]...)...)...)
	if n := streamLen(t, url, sink.DefaultStream); n != uint64(len(evs)) {
		t.Fatalf("the stream stores %d records, want %d: the duplicate window did not drop the copy", n, len(evs))
	}

	tail := runCLI(t, "", "audit", "tail", "--nats", url)
	if want := tailLines(evs...); tail.code != 0 || tail.stdout != want {
		t.Errorf("audit tail: exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", tail.code, tail.stdout, want, tail.stderr)
	}
	if n := strings.Count(tail.stdout, bound.ID()+"\n"); n != 1 {
		t.Errorf("audit tail printed %s %d times, want once", bound.ID(), n)
	}

	js := runCLI(t, "", "audit", "tail", "--nats", url, "--stream", sink.DefaultStream, "-o", "json")
	if js.code != 0 {
		t.Fatalf("audit tail -o json: exit %d\n%s", js.code, js.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(js.stdout, "\n"), "\n")
	if len(lines) != len(evs) {
		t.Fatalf("-o json printed %d lines for %d records:\n%s", len(lines), len(evs), js.stdout)
	}
	for i, line := range lines {
		stored, err := json.Marshal(evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if line != string(stored) {
			t.Errorf("line %d:\n%s\nwant the record as stored:\n%s", i+1, line, stored)
		}
		var ev cloudevents.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.ID() != evs[i].ID() {
			t.Errorf("line %d is not the CloudEvent %s: %v", i+1, evs[i].ID(), err)
		}
	}

	// --type keeps the records whose type starts with the prefix.
	var leases []cloudevents.Event
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type(), "io.macrack.lease") {
			leases = append(leases, ev)
		}
	}
	filtered := runCLI(t, "", "audit", "tail", "--nats", url, "--type", "io.macrack.lease")
	if want := tailLines(leases...); filtered.code != 0 || filtered.stdout != want {
		t.Errorf("--type io.macrack.lease: exit %d\n%s\nwant:\n%s", filtered.code, filtered.stdout, want)
	}
	// Positive control: the records it left out are in the stream.
	for _, typ := range []string{"io.macrack.chassis.quarantine.started", "io.macrack.denial.webhook"} {
		if !strings.Contains(tail.stdout, typ) || strings.Contains(filtered.stdout, typ) {
			t.Errorf("%s: in the whole tail %v, in the filtered one %v", typ, strings.Contains(tail.stdout, typ), strings.Contains(filtered.stdout, typ))
		}
	}
	none := runCLI(t, "", "audit", "tail", "--nats", url, "--type", "io.macrack.image")
	if none.code != 0 || none.stdout != "" || !strings.Contains(none.stderr, "holds no records of type io.macrack.image") {
		t.Errorf("--type io.macrack.image: exit %d stdout %q stderr %q", none.code, none.stdout, none.stderr)
	}

	report := runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--nats", url)
	if report.code != 0 || report.stdout != dayTable {
		t.Errorf("billing report --nats: exit %d\n%s\nwant:\n%s\nstderr:\n%s", report.code, report.stdout, dayTable, report.stderr)
	}

	// A copy an older operator stored past its duplicate window is in the
	// stream twice: audit tail shows both, billing counts it once.
	publishCopy(t, url, bound)
	twice := runCLI(t, "", "audit", "tail", "--nats", url)
	if n := strings.Count(twice.stdout, bound.ID()+"\n"); twice.code != 0 || n != 2 {
		t.Errorf("after a late copy, audit tail printed %s %d times, want 2 (exit %d)", bound.ID(), n, twice.code)
	}
	again := runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--nats", url, "--stream", sink.DefaultStream)
	if again.code != 0 || again.stdout != dayTable {
		t.Errorf("billing report over a stream with a copy: exit %d\n%s\nwant:\n%s", again.code, again.stdout, dayTable)
	}
	rj := runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--nats", url, "-o", "json")
	var rep BillingReport
	if err := json.Unmarshal([]byte(rj.stdout), &rep); err != nil || rep.Records != len(evs)+1 || rep.Duplicates != 1 {
		t.Errorf("-o json: records %d duplicates %d, want %d and 1 (%v)\n%s", rep.Records, rep.Duplicates, len(evs)+1, err, rj.stdout)
	}
}

func TestAuditTailFollowsUntilInterrupted(t *testing.T) {
	url := startNATS(t)
	evs := dayOfRecords(t)
	publish(t, url, "", evs[:3]...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, now: func() time.Time { return fixedNow }},
			[]string{"audit", "tail", "--nats", url, "--follow", "-o", "json"})
	}()
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok(out.String()) {
			select {
			case code := <-done:
				t.Fatalf("audit tail --follow ended (exit %d) before %s\nstdout:\n%s\nstderr:\n%s", code, what, out.String(), errOut.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 20s\nstdout:\n%s\nstderr:\n%s", what, out.String(), errOut.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("records already stored", func(s string) bool { return strings.Count(s, "\n") == 3 })
	// It has printed the stream and waits: nothing ends it but the
	// interrupt.
	time.Sleep(2500 * time.Millisecond)
	select {
	case code := <-done:
		t.Fatalf("audit tail --follow ended (exit %d) with the stream read", code)
	default:
	}
	publish(t, url, "", evs[3:5]...)
	waitFor("the records published since", func(s string) bool { return strings.Count(s, "\n") == 5 })
	for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !strings.Contains(line, `"id":"`+evs[i].ID()+`"`) {
			t.Errorf("line %d is not %s: %s", i+1, evs[i].ID(), line)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("interrupted: exit %d, want 0\n%s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("audit tail --follow did not end within 10s of the interrupt")
	}

	// The text follow prints a header and aligned lines as they come.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	var text syncBuffer
	go func() {
		done <- run(ctx2, env{stdin: strings.NewReader(""), stdout: &text, stderr: &errOut, now: func() time.Time { return fixedNow }},
			[]string{"audit", "tail", "--nats", url, "--follow", "--type", "io.macrack.lease.bound"})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(text.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel2()
	if code := <-done; code != 0 {
		t.Errorf("text follow: exit %d\n%s", code, errOut.String())
	}
	want := fmt.Sprintf("%-20s  %-46s  %-32s  %s\n", "TIME", "TYPE", "SUBJECT", "ID")
	for _, ev := range evs[:5] {
		if ev.Type() == "io.macrack.lease.bound" {
			want += fmt.Sprintf("%-20s  %-46s  %-32s  %s\n", ev.Time().UTC().Format(time.RFC3339), ev.Type(), ev.Subject(), ev.ID())
		}
	}
	if text.String() != want {
		t.Errorf("text follow printed:\n%s\nwant:\n%s", text.String(), want)
	}
}

// syncBuffer is a bytes.Buffer that a running command writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Each refusal beside its positive control.
func TestAuditTailErrors(t *testing.T) {
	url := startNATS(t)
	publish(t, url, "", dayOfRecords(t)[:2]...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "nats://" + l.Addr().String()
	_ = l.Close()

	cases := []struct {
		name   string
		args   []string
		stderr []string
		mended []string
	}{
		{"a server that is not there", []string{"--nats", closed},
			[]string{"connecting to " + closed}, []string{"--nats", url}},
		{"a stream that is not there", []string{"--nats", url, "--stream", "NOPE"},
			[]string{"stream NOPE on " + url}, []string{"--nats", url, "--stream", "MACRACK_AUDIT"}},
		{"an empty stream name", []string{"--nats", url, "--stream", ""},
			[]string{"--stream is empty"}, []string{"--nats", url}},
		{"an unknown output", []string{"--nats", url, "-o", "table"},
			[]string{`"table" is not text or json`}, []string{"--nats", url, "-o", "text"}},
		{"a positional argument", []string{"--nats", url, "MACRACK_AUDIT"},
			[]string{`unexpected argument "MACRACK_AUDIT"`}, []string{"--nats", url}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", append([]string{"audit", "tail"}, tc.args...)...)
			expectation{code: 2, stderr: tc.stderr, absent: noStackTrace}.check(t, r)
			mended := runCLI(t, "", append([]string{"audit", "tail"}, tc.mended...)...)
			expectation{code: 0, stdout: []string{"TIME", "TYPE", "SUBJECT", "ID", "io.macrack.lease."}}.check(t, mended)
		})
	}

	// An empty stream prints nothing, and says so on stderr.
	js := jetStreamOf(t, url)
	if _, err := js.AddStream(&nats.StreamConfig{Name: "EMPTY", Subjects: []string{"empty.>"}}); err != nil {
		t.Fatal(err)
	}
	empty := runCLI(t, "", "audit", "tail", "--nats", url, "--stream", "EMPTY")
	if empty.code != 0 || empty.stdout != "" || !strings.Contains(empty.stderr, "stream EMPTY on "+url+" holds no records") {
		t.Errorf("an empty stream: exit %d stdout %q stderr %q", empty.code, empty.stdout, empty.stderr)
	}
}

func TestAuditTailDefaultsToMACRACK_AUDIT_NATS(t *testing.T) {
	url := startNATS(t)
	publish(t, url, "", dayOfRecords(t)[:2]...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "nats://" + l.Addr().String()
	_ = l.Close()

	t.Setenv(auditNATSEnv, closed)
	expectation{code: 2, stderr: []string{"connecting to " + closed}}.check(t, runCLI(t, "", "audit", "tail"))
	// --nats wins over the variable.
	expectation{code: 0, stdout: []string{"io.macrack.lease.created"}}.check(t, runCLI(t, "", "audit", "tail", "--nats", url))
	t.Setenv(auditNATSEnv, url)
	expectation{code: 0, stdout: []string{"io.macrack.lease.created", "io.macrack.lease.bound"}}.check(t, runCLI(t, "", "audit", "tail"))
}

func TestAuditUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want expectation
	}{
		{[]string{"audit", "tail", "--help"}, expectation{code: 0, stdout: []string{"--follow", "--type PREFIX", "$MACRACK_AUDIT_NATS", "nats://127.0.0.1:4222", "Exit codes:"}}},
		{[]string{"help", "audit", "tail"}, expectation{code: 0, stdout: []string{"--stream NAME"}}},
		{[]string{"audit", "--help"}, expectation{code: 0, stdout: []string{"tail"}}},
		{[]string{"audit"}, expectation{code: 2, stderr: []string{"no subcommand given", "macrackctl audit --help"}}},
		{[]string{"audit", "head"}, expectation{code: 2, stderr: []string{`unknown subcommand "head"`}}},
	} {
		tc.want.check(t, runCLI(t, "", tc.args...))
	}
}
