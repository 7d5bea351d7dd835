// Command darwincheck type-checks the module's packages, test files included,
// as they build for darwin/arm64 with cgo: the vz adapter, the darwin facts,
// the reboot helper, clonefile, the launchd launcher and the darwin tests,
// against the real APIs of github.com/Code-Hex/vz/v3, golang.org/x/sys/unix
// and the project's own packages. Linux CI never compiles these files
// otherwise; a renamed vz method would wait for the first build on a Mac.
//
//	go run ./hack/darwincheck ./...
//
// cgo cannot run here, so a package's `import "C"` fails to import and
// go/types leaves its C.x expressions unchecked; every Go declaration of
// that package, vz's exported API included, is still checked for real. The
// "could not import C" errors of dependencies are therefore expected and
// skipped; any other error, and any error at all in the packages named on
// the command line, fails the check.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/boualleiguie/macrack-operator/hack/darwincheck/check"
)

func main() {
	verbose := flag.Bool("v", false, "list the skipped errors of dependencies too")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./hack/darwincheck [-v] <package patterns>")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	start := time.Now()
	res, err := check.Run(check.Options{Patterns: flag.Args()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "darwincheck: %v\n", err)
		os.Exit(2)
	}
	skipped := io.Discard
	if *verbose {
		skipped = os.Stderr
	}
	for _, e := range res.Skipped {
		fmt.Fprintf(skipped, "skipped (a dependency's cgo): %s\n", e)
	}
	for _, e := range res.Errors {
		fmt.Fprintln(os.Stderr, e)
	}
	if len(res.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "darwincheck: %d errors for %s in %d packages\n", len(res.Errors), check.Platform, res.Packages)
		os.Exit(1)
	}
	fmt.Printf("darwincheck: %d packages type-check for %s (%d darwin files; %d cgo imports of dependencies skipped) in %s\n",
		res.Packages, check.Platform, res.DarwinFiles, len(res.Skipped), time.Since(start).Round(100*time.Millisecond))
}
