package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/boualleiguie/macrack-operator/internal/audit/billing"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
)

const billingUsage = `Bill chassis time from MacRack's audit stream.

Usage:
  macrackctl billing report --from TIME --to TIME (--nats URL | --file FILE) [flags]

Commands:
  report   sum each tenant's billable chassis-hours over a window
`

const billingReportUsage = `Sum each tenant's billable chassis-hours over a window.

Usage:
  macrackctl billing report --from TIME --to TIME (--nats URL | --file FILE) [flags]

Every record is read: from the audit stream in NATS JetStream, or from a
file of JSON lines, one structured CloudEvent per line, as the operator
writes them with --audit-sink=stdout (blank lines are ignored). Each record
id counts once, however many copies were read.

A lease bills from its bound record (its boundAt) to its released record
(its releasedAt), within the window [--from, --to): a lease still bound at
the window's end bills to the window's end (or to now, when the window runs
into the future), and a lease whose bound record
is not among those read bills nothing. The time a tenant's chassis spent in
quarantine, from quarantine.started to quarantine.ended, is part of its
chassis-hours and is reported apart as OUTAGE-HOURS, for the billing system
to credit as its terms say.

Flags:
  --from TIME           the window's start, RFC 3339, like 2026-06-01T00:00:00Z
                        (required)
  --to TIME             the window's end, RFC 3339, after --from (required)
  --nats URL            read the JetStream stream on this NATS server (a
                        cluster's servers separated by commas)
  --file FILE           read a JSON-lines file instead; - reads stdin
                        (exactly one of --nats and --file)
  --stream NAME         the stream, with --nats (default MACRACK_AUDIT)
  --now TIME            the time the report is as of, RFC 3339 (default: this
                        machine's clock); a window past it bills up to it
  -o, --output FORMAT   text or json (default text)

Output:
  text  a table: TENANT, LEASES, CHASSIS-HOURS and OUTAGE-HOURS (hours to 2
        decimals), one row per tenant, then a TOTAL row
  json  one object: apiVersion "macrackctl/v1", kind BillingReport, from,
        to, records (how many were read), duplicates (how many of those
        repeated an id already read, and were skipped), and usage [{tenant,
        leases, chassisHours, outageHours}]. Fields are only ever added.

Exit codes: 0 reported; 2 bad arguments, an unreadable file or stream, or a
record that is not a CloudEvent.
`

func runBilling(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprint(e.stdout, billingUsage)
		if len(args) == 0 {
			return usagef("billing", "no subcommand given")
		}
		return errHelp
	}
	if args[0] == "report" {
		return runBillingReport(ctx, e, args[1:])
	}
	return usagef("billing", "unknown subcommand %q", args[0])
}

// BillingReport is billing report's JSON.
type BillingReport struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	From       string `json:"from"`
	To         string `json:"to"`
	// Records is how many records were read, duplicates included.
	Records int `json:"records"`
	// Duplicates is how many of them repeated an id already read.
	Duplicates int             `json:"duplicates"`
	Usage      []billing.Usage `json:"usage"`
}

func runBillingReport(ctx context.Context, e env, args []string) error {
	const cmd = "billing report"
	fs := newFlagSet(cmd)
	fromFlag := fs.String("from", "", "")
	toFlag := fs.String("to", "", "")
	natsURL := fs.String("nats", "", "")
	file := fs.String("file", "", "")
	stream := fs.String("stream", sink.DefaultStream, "")
	nowFlag := fs.String("now", "", "")
	output := textOutputFlag(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, billingReportUsage)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	from, err := windowFlag(cmd, "from", *fromFlag)
	if err != nil {
		return err
	}
	to, err := windowFlag(cmd, "to", *toFlag)
	if err != nil {
		return err
	}
	if !to.After(from) {
		return usagef(cmd, "--to %s is not after --from %s", *toFlag, *fromFlag)
	}
	switch {
	case *natsURL != "" && *file != "":
		return usagef(cmd, "--nats and --file are exclusive: read the stream or a file, not both")
	case *natsURL == "" && *file == "":
		return usagef(cmd, "want --nats URL (the audit stream) or --file FILE (JSON lines)")
	case *file != "" && flagSet(fs, "stream"):
		return usagef(cmd, "--stream applies to --nats, not to --file")
	case *stream == "":
		return usagef(cmd, "--stream is empty")
	}

	var events []cloudevents.Event
	if *file != "" {
		events, err = readEventLines(e, *file)
	} else {
		events, err = readStream(ctx, *natsURL, *stream)
	}
	if err != nil {
		return err
	}
	// A window that runs into the future bills a lease still bound up to
	// now, not for hours that have not happened yet.
	now := e.now()
	if *nowFlag != "" {
		if now, err = time.Parse(time.RFC3339, *nowFlag); err != nil {
			return usagef(cmd, "--now %q is not an RFC 3339 time, like 2026-06-01T12:00:00Z", *nowFlag)
		}
	}
	if to.After(now) && now.After(from) {
		to = now
	}
	usage, err := billing.Report(events, from, to)
	if err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	r := BillingReport{
		APIVersion: "macrackctl/v1",
		Kind:       "BillingReport",
		From:       from.UTC().Format(time.RFC3339),
		To:         to.UTC().Format(time.RFC3339),
		Records:    len(events),
		Duplicates: duplicates(events),
		Usage:      nonNil(usage),
	}
	if *output == formatJSONLine {
		return writeJSON(e.stdout, r)
	}
	writeBillingTable(e.stdout, r)
	return nil
}

// windowFlag parses --from or --to.
func windowFlag(cmd, name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, usagef(cmd, "--%s is required (RFC 3339, like 2026-06-01T00:00:00Z)", name)
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef(cmd, "--%s %q is not an RFC 3339 time, like 2026-06-01T00:00:00Z", name, v)
	}
	return t, nil
}

// flagSet reports whether name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// maxEventLine bounds one JSON line; a record is a few kilobytes.
const maxEventLine = 4 << 20

// readEventLines reads structured CloudEvents, one per line, from name (-
// is stdin). A line that is not one is an error naming the file and line.
func readEventLines(e env, name string) ([]cloudevents.Event, error) {
	var r io.Reader
	label := name
	if name == "-" {
		r, label = e.stdin, "stdin"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errInput, err)
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var out []cloudevents.Event
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev cloudevents.Event
		err := json.Unmarshal([]byte(line), &ev)
		if err == nil {
			err = ev.Validate()
		}
		if err != nil {
			// sdk-go's messages end in a newline.
			return nil, fmt.Errorf("%w: %s:%d: not a CloudEvent: %s", errInput, label, n, strings.TrimSpace(err.Error()))
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", errInput, label, err)
	}
	return out, nil
}

// readStream reads every record the stream holds.
func readStream(ctx context.Context, url, stream string) ([]cloudevents.Event, error) {
	r, err := sink.OpenReader(ctx, url, stream)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errInput, err)
	}
	defer r.Close()
	events, err := r.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s on %s: %w", errInput, stream, url, err)
	}
	return events, nil
}

// duplicates counts the records whose id an earlier record already had:
// the ones billing.Report skips.
func duplicates(events []cloudevents.Event) int {
	seen := make(map[string]bool, len(events))
	n := 0
	for _, ev := range events {
		if seen[ev.ID()] {
			n++
		}
		seen[ev.ID()] = true
	}
	return n
}

func writeBillingTable(w io.Writer, r BillingReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tLEASES\tCHASSIS-HOURS\tOUTAGE-HOURS")
	var total billing.Usage
	for _, u := range r.Usage {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\n", u.Tenant, u.Leases, u.ChassisHours, u.OutageHours)
		total.Leases += u.Leases
		total.ChassisHours += u.ChassisHours
		total.OutageHours += u.OutageHours
	}
	fmt.Fprintf(tw, "TOTAL\t%d\t%.2f\t%.2f\n", total.Leases, total.ChassisHours, total.OutageHours)
	tw.Flush()
}
