package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// envWrites, set to a directory, has the API server keep an audit log of
// every write there, and each wave print its writes per lease by writer,
// verb, resource and, for the status writes, what they wrote: where the
// writes that are paid per second rather than per lease come from. The
// log costs the API server CPU: a run with it measures no CPU.
const envWrites = "FLEET_WRITES_DIR"

// writesAuditPolicy logs every write with its request body, once it
// completed; nothing else.
const writesAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Request
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditFlags are the API server's flags that have it write the audit log
// into dir, and the log's path.
func auditFlags(dir string) (log string, flags map[string]string, err error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(writesAuditPolicy), 0o600); err != nil {
		return "", nil, err
	}
	log = filepath.Join(dir, "audit.log")
	return log, map[string]string{"audit-policy-file": policy, "audit-log-path": log,
		"audit-log-mode": "blocking", "audit-log-format": "json"}, nil
}

// logSize is the audit log's length now: a wave's writes are those
// between its two sizes (the log is written before each write's answer).
func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// writesBetween tallies the audit log's writes from byte from to byte to,
// by row (writer, verb, where, what).
func writesBetween(path string, from, to int64) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(io.NewSectionReader(f, from, to-from))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	rows := map[string]int{}
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.ObjectRef == nil {
			continue
		}
		rows[writeRow(ev)]++
	}
	return rows, sc.Err()
}

// writeRow names a write: who wrote, the verb, resource[/subresource] and,
// for a status write, the status fields its body names (a runtime write
// with its phase).
func writeRow(ev auditv1.Event) string {
	writer := ev.User.Username
	switch {
	case ev.ImpersonatedUser != nil:
		writer = "tenant"
	case writer == harness.OperatorUser:
		writer = "operator"
	case strings.HasPrefix(writer, "system:serviceaccount:"+harness.AgentsNamespace+":"):
		writer = "agent"
	case writer == "system:apiserver":
		writer = "apiserver"
	}
	where := ev.ObjectRef.Resource
	if ev.ObjectRef.Subresource != "" {
		where += "/" + ev.ObjectRef.Subresource
	}
	row := fmt.Sprintf("%-9s %-6s %s", writer, ev.Verb, where)
	if ev.ObjectRef.Subresource == "status" && ev.RequestObject != nil {
		row += " " + statusFields(ev.RequestObject.Raw)
	}
	if c := ev.ResponseStatus; c != nil && c.Code >= 400 {
		row += fmt.Sprintf(" (%d)", c.Code)
	}
	return row
}

// statusFields names the fields of status a merge patch or an apply
// writes, two levels deep: status.reported.images, status.runtime (phase
// Pulling).
func statusFields(body []byte) string {
	var obj struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if json.Unmarshal(body, &obj) != nil || obj.Status == nil {
		return "(json patch)"
	}
	var names []string
	for k, v := range obj.Status {
		switch k {
		case "reported":
			var sub map[string]json.RawMessage
			_ = json.Unmarshal(v, &sub)
			for s := range sub {
				names = append(names, "reported."+s)
			}
		case "runtime":
			var rt struct {
				Phase string `json:"phase"`
			}
			_ = json.Unmarshal(v, &rt)
			names = append(names, "runtime("+rt.Phase+")")
		default:
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// writesTable renders rows per lease, most first.
func writesTable(rows map[string]int, n int) []string {
	keys := make([]string, 0, len(rows))
	total := 0
	for k, v := range rows {
		keys = append(keys, k)
		total += v
	}
	slices.SortFunc(keys, func(a, b string) int {
		if rows[a] != rows[b] {
			return rows[b] - rows[a]
		}
		return strings.Compare(a, b)
	})
	out := []string{fmt.Sprintf("  writes by writer, verb and what (audit log): %d, %.1f per lease", total, float64(total)/float64(n))}
	for _, k := range keys {
		out = append(out, fmt.Sprintf("    %7d %6.2f  %s", rows[k], float64(rows[k])/float64(n), k))
	}
	return out
}
