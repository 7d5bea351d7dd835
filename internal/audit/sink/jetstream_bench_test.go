package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/boualleiguie/macrack-operator/test/natsserver"
)

// BenchmarkJetStreamServerMemory measures what one subject per record
// costs the server: its resident memory per stored record, with every
// record on its own subject (MacRack's stream) and, side by side, on one
// subject (the stream before it), after the records are written and after
// a restart reads them back from disk. Each record is 700 bytes, about a
// lease's bound record. Run it with -benchtime 200000x.
func BenchmarkJetStreamServerMemory(b *testing.B) {
	for _, perRecord := range []bool{false, true} {
		name := "one-subject"
		if perRecord {
			name = "subject-per-record"
		}
		b.Run(name, func(b *testing.B) {
			s, err := natsserver.Start(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Kill() }()
			nc, err := nats.Connect(s.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
			if err != nil {
				b.Fatal(err)
			}
			cfg := StreamConfig(JetStreamOptions{})
			if !perRecord {
				cfg.MaxMsgsPerSubject, cfg.DiscardNewPerSubject, cfg.Discard = 0, false, jetstream.DiscardOld
			}
			if _, err := js.CreateStream(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
			before := serverMemory(b, s)
			body := make([]byte, 700)
			b.ResetTimer()
			for i := range b.N {
				subj := "macrack.audit.lease.bound"
				if perRecord {
					subj += fmt.Sprintf(".lease/3f2a9c4e-8b1d-4e7a-9c2f-%012d/%d", i/8, i%8+1)
				}
				if _, err := js.PublishAsync(subj, body); err != nil {
					b.Fatal(err)
				}
				if i%2048 == 2047 {
					<-js.PublishAsyncComplete()
				}
			}
			<-js.PublishAsyncComplete()
			b.StopTimer()
			written := serverMemory(b, s)
			if err := s.Kill(); err != nil {
				b.Fatal(err)
			}
			if err := s.Start(); err != nil {
				b.Fatal(err)
			}
			restarted := serverMemory(b, s)
			b.ReportMetric(float64(written-before)/float64(b.N), "server-B/record")
			b.ReportMetric(float64(restarted-before)/float64(b.N), "restarted-B/record")
		})
	}
}

// serverMemory is the server's resident memory (/varz mem), once it has
// settled: two reads a second apart within 1%.
func serverMemory(b *testing.B, s *natsserver.Server) int64 {
	b.Helper()
	read := func() int64 {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/varz", s.HTTPPort))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Mem int64 `json:"mem"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			b.Fatal(err)
		}
		return v.Mem
	}
	last := read()
	for range 30 {
		time.Sleep(time.Second)
		m := read()
		if d := m - last; d < last/100 && -d < last/100 {
			return m
		}
		last = m
	}
	return last
}
