package sink

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestOpenReadsTheSinksAddress: each scheme makes its sink, a JetStream
// address carries its stream, replicas and credentials, and a bad address
// is refused with what is wrong.
func TestOpenReadsTheSinksAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, err string
		want      JetStreamOptions
	}{
		{addr: "nats://nats.example:4222", want: JetStreamOptions{URL: "nats://nats.example:4222"}},
		{addr: "nats://nats.example:4222?stream=BILLING&replicas=3&creds=/etc/macrack/nats.creds",
			want: JetStreamOptions{URL: "nats://nats.example:4222", Stream: "BILLING", Replicas: 3, Credentials: "/etc/macrack/nats.creds"}},
		{addr: "nats://n1.example:4222,n2.example:4222,nats://n3.example:4222?replicas=3",
			want: JetStreamOptions{URL: "nats://n1.example:4222,nats://n2.example:4222,nats://n3.example:4222", Replicas: 3}},
		{addr: "tls://n1.example:4222,n2.example:4222", want: JetStreamOptions{URL: "tls://n1.example:4222,tls://n2.example:4222"}},
		{addr: "nats://nats.example:4222?replicas=9", err: `replicas="9": want 1 to 5`},
		{addr: "nats://nats.example:4222?replica=3", err: `unknown parameter "replica"`},
		{addr: "nats://n1.example:4222,,n2.example:4222", err: `server "nats://": want nats://host:port`},
		{addr: "nats://n1.example:4222/MACRACK", err: `server "nats://n1.example:4222/MACRACK": want nats://host:port`},
		{addr: "nats://n1.example:4222?replicas=%zz", err: `invalid URL escape`},
	} {
		got, err := jetStreamOptions(tc.addr)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.addr, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %+v %v, want %+v", tc.addr, got, err, tc.want)
		}
	}
	if s, err := Open(context.Background(), "stdout", io.Discard); err != nil || s == nil {
		t.Fatalf("stdout: %v", err)
	}
	if s, err := Open(context.Background(), "https://billing.example/events", io.Discard); err != nil || s == nil {
		t.Fatalf("https: %v", err)
	}
	if _, err := Open(context.Background(), "kafka://broker:9092", io.Discard); err == nil || !strings.Contains(err.Error(), "want nats://, http(s):// or stdout") {
		t.Fatalf("an unknown scheme: %v", err)
	}
}
