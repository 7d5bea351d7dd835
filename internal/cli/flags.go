package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlagSet returns a FlagSet that prints nothing itself: parseFlags
// reports errors once, in macrackctl's words, and help goes to stdout.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args and returns the positional arguments. Flags may
// follow positional arguments (`policy test policies --output json`), as
// kubectl users expect; "--" ends the flags. -h prints usage to stdout and
// returns errHelp.
func parseFlags(fs *flag.FlagSet, cmd string, args []string, stdout io.Writer, usage string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				io.WriteString(stdout, usage)
				return nil, errHelp
			}
			return nil, &usageError{cmd: cmd, err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// stringList is a repeatable string flag (-f a -f b).
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// format is an --output value.
type format string

const (
	formatTable format = "table"
	formatJSON  format = "json"
	formatJUnit format = "junit"
)

func (f *format) String() string { return string(*f) }

func (f *format) Set(v string) error {
	switch format(v) {
	case formatTable, formatJSON, formatJUnit:
		*f = format(v)
		return nil
	}
	return fmt.Errorf("%q is not table, json or junit", v)
}

// outputFlag registers --output and its short form -o.
func outputFlag(fs *flag.FlagSet) *format {
	f := formatTable
	fs.Var(&f, "output", "table, json or junit")
	fs.Var(&f, "o", "short for --output")
	return &f
}
