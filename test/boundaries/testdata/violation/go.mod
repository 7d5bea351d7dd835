module example.com/violation

go 1.26.0

require github.com/nats-io/nats.go v0.0.0

// A stand-in for the JetStream client, so that the fixture needs no
// download: the check names it by its import path.
replace github.com/nats-io/nats.go => ./third_party/nats.go
