// Command registry is the CNCF Distribution registry, built as a library
// from the Go module proxy, for MacRack's tests and `make run`: a real OCI
// registry on loopback that golden images are pushed to and pulled from.
//
// It serves plain HTTP on -addr with the filesystem storage driver under
// -root, optionally behind basic auth (-htpasswd), and nothing else: no
// TLS, no token auth, no cloud storage drivers, no tracing exporters, so
// that its compile stays small. -addr may name port 0;
// the address it bound is printed ("listening on 127.0.0.1:PORT") and, with
// -addr-file, written to that file once it accepts connections. SIGINT and
// SIGTERM stop it at once, closing the connections in flight.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/sirupsen/logrus"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:5000", "host:port to listen on (port 0: any free port)")
	root := flag.String("root", "", "storage directory (required)")
	addrFile := flag.String("addr-file", "", "write the bound host:port to this file once listening")
	// A fixed secret, so that a restarted registry accepts the upload
	// sessions the previous one started.
	secret := flag.String("secret", "macrack-test-registry-secret", "HTTP secret that signs upload state")
	logLevel := flag.String("log-level", "warn", "logrus level: debug, info, warn, error")
	htpasswd := flag.String("htpasswd", "", "require basic auth of the users in this htpasswd file (bcrypt)")
	flag.Parse()
	if *root == "" {
		return errors.New("-root is required")
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(absRoot, 0o755); err != nil {
		return err
	}
	lvl, err := logrus.ParseLevel(*logLevel)
	if err != nil {
		return err
	}
	logrus.SetLevel(lvl)
	logrus.SetOutput(os.Stderr)

	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": absRoot},
			"delete":     configuration.Parameters{"enabled": true},
			// The filesystem driver serves blobs itself.
			"redirect": configuration.Parameters{"disable": true},
		},
	}
	cfg.HTTP.Secret = *secret
	if *htpasswd != "" {
		if _, err := os.Stat(*htpasswd); err != nil {
			return fmt.Errorf("-htpasswd: %w", err)
		}
		cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "macrack-test-registry", "path": *htpasswd}}
	}
	cfg.Log.Level = configuration.Loglevel(*logLevel)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	app := handlers.NewApp(ctx, cfg)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	bound := ln.Addr().String()
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(bound+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			return err
		}
	}
	fmt.Printf("listening on %s\n", bound)

	srv := &http.Server{Handler: app, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// At once, in-flight requests and all: a test registry that is stopped
	// goes away as a crashed one would, and a restart is not kept waiting.
	if err := srv.Close(); err != nil {
		return err
	}
	return app.Shutdown()
}
