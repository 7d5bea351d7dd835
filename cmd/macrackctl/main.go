// Command macrackctl is MacRack's command-line tool. Its logic, the
// subcommands and their exit codes live in internal/cli.
package main

import (
	"os"

	"github.com/boualleiguie/macrack-operator/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
