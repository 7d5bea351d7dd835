// Module actionlint builds the pinned actionlint (the Makefile's
// ACTIONLINT_VERSION) from the Go module proxy, to lint the workflows no
// runner here can run. golang.org/x/sys and golang.org/x/sync, the only
// packages it shares with the project's build, are at the project's
// versions, so they compile once; fatih/color, go-runewidth and
// clipperhouse/uax29 are newer than the project's (actionlint v1.7.12
// requires them), compile in about a second, and appear in no package the
// project's tests build. Hence hack/check-aligned-modules.sh leaves this
// module out. Do not `go mod tidy` x/sys and x/sync down.
module github.com/boualleiguie/macrack-operator/hack/actionlint

go 1.26.8

tool github.com/rhysd/actionlint/cmd/actionlint

require (
	github.com/bmatcuk/doublestar/v4 v4.10.0 // indirect
	github.com/clipperhouse/uax29/v2 v2.7.0 // indirect
	github.com/fatih/color v1.19.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mattn/go-runewidth v0.0.21 // indirect
	github.com/mattn/go-shellwords v1.0.12 // indirect
	github.com/rhysd/actionlint v1.7.12 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.3 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
