// Package sink delivers the audit stream's CloudEvents: to NATS JetStream
// (one subject per record, each stored once), over HTTP, or as JSON lines;
// and reads a JetStream stream back. Only the exporter and the commands
// link it: a controller that journals does not (test/boundaries).
package sink

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
)

// A Sink takes records. Publish returns nil only once the record is
// durably acknowledged: the exporter advances an object's cursor past a
// record only then. Publishing the same id twice must be harmless; sinks
// that can (JetStream) drop the second copy themselves, and consumers
// deduplicate on the id in any case.
//
// A new sink is one more case in Open and a type with these two methods.
// Kafka, for one, would be sdk-go's kafka_sarama sender with the record's
// subject as the message key (one object's records stay in one partition,
// in order) and an idempotent producer with acks=all.
type Sink interface {
	Publish(ctx context.Context, ev cloudevents.Event) error
	Close() error
}

// Open parses a sink's address: nats://host:port (JetStream; a cluster's
// servers separated by commas), with the query parameters stream=NAME,
// replicas=N (on a JetStream cluster) and creds=FILE (a NATS credentials
// file); http(s)://... (CloudEvents over HTTP); or stdout (JSON lines).
func Open(ctx context.Context, addr string, stdout io.Writer) (Sink, error) {
	if addr == "stdout" || addr == "-" {
		return NewLines(stdout), nil
	}
	scheme, _, _ := strings.Cut(addr, "://")
	switch strings.ToLower(scheme) {
	case "nats", "tls":
		o, err := jetStreamOptions(addr)
		if err != nil {
			return nil, fmt.Errorf("audit sink %q: %w", addr, err)
		}
		return NewJetStream(ctx, o)
	case "http", "https":
		if _, err := url.Parse(addr); err != nil {
			return nil, fmt.Errorf("audit sink %q: %w", addr, err)
		}
		return NewHTTP(addr)
	default:
		return nil, fmt.Errorf("audit sink %q: want nats://, http(s):// or stdout", addr)
	}
}

// jetStreamOptions reads a nats:// address: its servers, and its query.
func jetStreamOptions(addr string) (JetStreamOptions, error) {
	servers, query, _ := strings.Cut(addr, "?")
	var o JetStreamOptions
	q, err := url.ParseQuery(query)
	if err != nil {
		return o, err
	}
	o.Stream, o.Credentials = q.Get("stream"), q.Get("creds")
	if r := q.Get("replicas"); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 || n > 5 {
			return o, fmt.Errorf("replicas=%q: want 1 to 5", r)
		}
		o.Replicas = n
	}
	for k := range q {
		if k != "stream" && k != "replicas" && k != "creds" {
			return o, fmt.Errorf("unknown parameter %q: want stream, replicas or creds", k)
		}
	}
	scheme, _, _ := strings.Cut(servers, "://")
	var urls []string
	for _, s := range strings.Split(servers, ",") {
		if !strings.Contains(s, "://") {
			s = scheme + "://" + s // the next servers of nats://a:4222,b:4222
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Path != "" {
			return o, fmt.Errorf("server %q: want %s://host:port", s, scheme)
		}
		urls = append(urls, u.String())
	}
	o.URL = strings.Join(urls, ",")
	return o, nil
}
