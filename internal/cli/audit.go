package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
)

const auditUsage = `Read MacRack's audit stream: the CloudEvents 1.0 records of every lease,
instance, chassis and image transition and of every policy denial, in the
NATS JetStream stream the operator publishes to (--audit-sink=nats://...).

Usage:
  macrackctl audit tail [flags]

Commands:
  tail   print the stream's records from its start; --follow waits for more
`

const auditTailUsage = `Print the audit stream's records, oldest first.

Usage:
  macrackctl audit tail [flags]

The stream is read from its start, and each record it holds is printed.
The operator publishes each record on a subject of its own
(macrack.audit.<kind>.<record>.<id>), which holds one message: a record
re-sent is stored once, whenever it is re-sent. A stream an older operator
wrote may hold a record twice; a consumer that must count each record once
deduplicates on the id, as 'macrackctl billing report' does.

--nats takes a cluster's servers separated by commas.

Flags:
  --nats URL            the NATS server (default: $MACRACK_AUDIT_NATS, then
                        nats://127.0.0.1:4222)
  --stream NAME         the JetStream stream (default MACRACK_AUDIT)
  --follow              keep waiting for new records until interrupted
  --type PREFIX         only the records whose type starts with PREFIX, for
                        example io.macrack.lease or io.macrack.denial
  -o, --output FORMAT   text or json (default text)

Output:
  text  one line per record under a header: TIME (RFC 3339, UTC), TYPE,
        SUBJECT (namespace/name, or name) and ID, in aligned columns. With
        --follow a column widens when a longer value arrives.
  json  each record as the stream stores it: one structured CloudEvent JSON
        object per line

Exit codes: 0 printed (or interrupted, with --follow); 2 bad arguments, the
server or the stream unreachable, or a record that is not a CloudEvent.
`

// auditNATSEnv names the default NATS server of the audit commands.
const auditNATSEnv = "MACRACK_AUDIT_NATS"

// defaultAuditNATS is the server when neither --nats nor $MACRACK_AUDIT_NATS
// says: a port-forwarded or local (make run) nats-server.
const defaultAuditNATS = "nats://127.0.0.1:4222"

func runAudit(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprint(e.stdout, auditUsage)
		if len(args) == 0 {
			return usagef("audit", "no subcommand given")
		}
		return errHelp
	}
	if args[0] == "tail" {
		return runAuditTail(ctx, e, args[1:])
	}
	return usagef("audit", "unknown subcommand %q", args[0])
}

// textFormat is the --output of the audit and billing commands.
type textFormat string

const (
	formatText     textFormat = "text"
	formatJSONLine textFormat = "json"
)

func (f *textFormat) String() string { return string(*f) }

func (f *textFormat) Set(v string) error {
	switch textFormat(v) {
	case formatText, formatJSONLine:
		*f = textFormat(v)
		return nil
	}
	return fmt.Errorf("%q is not text or json", v)
}

// textOutputFlag registers --output and -o, text or json.
func textOutputFlag(fs *flag.FlagSet) *textFormat {
	f := formatText
	fs.Var(&f, "output", "text or json")
	fs.Var(&f, "o", "short for --output")
	return &f
}

func runAuditTail(ctx context.Context, e env, args []string) error {
	const cmd = "audit tail"
	fs := newFlagSet(cmd)
	natsURL := fs.String("nats", "", "")
	stream := fs.String("stream", sink.DefaultStream, "")
	follow := fs.Bool("follow", false, "")
	typ := fs.String("type", "", "")
	output := textOutputFlag(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, auditTailUsage)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	if *stream == "" {
		return usagef(cmd, "--stream is empty")
	}
	url := *natsURL
	if url == "" {
		url = os.Getenv(auditNATSEnv)
	}
	if url == "" {
		url = defaultAuditNATS
	}
	r, err := sink.OpenReader(ctx, url, *stream)
	if err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	defer r.Close()

	p := &tailPrinter{w: e.stdout, json: *output == formatJSONLine, stream: *follow}
	err = r.Each(ctx, *follow, func(ev cloudevents.Event) error {
		if !strings.HasPrefix(ev.Type(), *typ) {
			return nil
		}
		return p.add(ev)
	})
	if *follow && err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil // interrupted: the end of a follow
	}
	if err != nil {
		return fmt.Errorf("%w: %s on %s: %w", errInput, *stream, url, err)
	}
	if p.printed == 0 && !*follow {
		what := "records"
		if *typ != "" {
			what = "records of type " + *typ + "*"
		}
		fmt.Fprintf(e.stderr, "stream %s on %s holds no %s\n", *stream, url, what)
	}
	return p.flush()
}

// tailPrinter prints audit tail's records. In text mode without stream it
// holds them, to align each column on its longest value; with stream (a
// follow) it prints each at once, and a column widens when a longer value
// comes.
type tailPrinter struct {
	w      io.Writer
	json   bool
	stream bool

	rows          []tailRow
	typeW, subjW  int
	headerPrinted bool
	// printed counts the records taken.
	printed int
}

type tailRow struct{ at, typ, subject, id string }

// The widths a follow starts with, so that most lines align from the
// first: the longest type MacRack writes (io.macrack.chassis.quarantine.
// reboot-requested) and a typical namespace/name.
const (
	followTypeWidth    = 46
	followSubjectWidth = 32
	// timeWidth is an RFC 3339 UTC time to the second.
	timeWidth = len("2006-01-02T15:04:05Z")
)

func (p *tailPrinter) add(ev cloudevents.Event) error {
	p.printed++
	if p.json {
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", ev.ID(), err)
		}
		_, err = p.w.Write(append(b, '\n'))
		return err
	}
	row := tailRow{at: "-", typ: orDash(ev.Type()), subject: orDash(ev.Subject()), id: orDash(ev.ID())}
	if t := ev.Time(); !t.IsZero() {
		row.at = t.UTC().Format(time.RFC3339)
	}
	if !p.stream {
		p.rows = append(p.rows, row)
		return nil
	}
	if !p.headerPrinted {
		p.typeW, p.subjW = followTypeWidth, followSubjectWidth
		p.printRow(tailRow{"TIME", "TYPE", "SUBJECT", "ID"})
		p.headerPrinted = true
	}
	p.typeW = max(p.typeW, utf8.RuneCountInString(row.typ))
	p.subjW = max(p.subjW, utf8.RuneCountInString(row.subject))
	return p.printRow(row)
}

// flush prints the held rows, aligned. With nothing to print it prints
// nothing, not even the header.
func (p *tailPrinter) flush() error {
	if p.json || p.stream || len(p.rows) == 0 {
		return nil
	}
	header := tailRow{"TIME", "TYPE", "SUBJECT", "ID"}
	p.typeW, p.subjW = utf8.RuneCountInString(header.typ), utf8.RuneCountInString(header.subject)
	for _, r := range p.rows {
		p.typeW = max(p.typeW, utf8.RuneCountInString(r.typ))
		p.subjW = max(p.subjW, utf8.RuneCountInString(r.subject))
	}
	if err := p.printRow(header); err != nil {
		return err
	}
	for _, r := range p.rows {
		if err := p.printRow(r); err != nil {
			return err
		}
	}
	return nil
}

func (p *tailPrinter) printRow(r tailRow) error {
	_, err := fmt.Fprintf(p.w, "%-*s  %-*s  %-*s  %s\n", timeWidth, r.at, p.typeW, r.typ, p.subjW, r.subject, r.id)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
