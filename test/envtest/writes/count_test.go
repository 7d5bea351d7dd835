package writes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// write is one write the API server's audit log records.
type write struct {
	At                   time.Time
	User                 string // the impersonated user, if any
	Verb                 string // create, update, patch, delete
	Group, Resource, Sub string
	Namespace, Name      string
	Code                 int32
	Body                 []byte
	// Manager is the write's field manager: the one it named, or the one
	// the API server derived from its user agent.
	Manager string
	// Response is the object the API server answered with, for the
	// writes the audit policy records at RequestResponse.
	Response []byte
	// writer is who wrote, by the user: operator, agent, tenant,
	// apiserver.
	writer string
}

// key is where a write went: resource[/subresource], with its group when it
// is not the core group.
func (w write) key() string {
	k := w.Resource
	if w.Group != "" {
		k += "." + w.Group
	}
	if w.Sub != "" {
		k += "/" + w.Sub
	}
	return k
}

func writerOf(user string) string {
	switch {
	case user == harness.OperatorUser:
		return "operator"
	case strings.HasPrefix(user, "system:serviceaccount:"+harness.AgentsNamespace+":"):
		return "agent"
	case user == tenantUser:
		return "tenant"
	case user == "system:apiserver":
		return "apiserver"
	}
	return user
}

// readAudit reads the audit log's complete writes from byte offset from on,
// and returns them with the offset the next read starts at.
func readAudit(from int64) ([]write, int64) { return readAuditTo(from, -1) }

// readAuditTo is readAudit of the bytes before offset to alone (to < 0: to
// the end).
func readAuditTo(from, to int64) ([]write, int64) {
	GinkgoHelper()
	f, err := os.Open(auditLog)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	_, err = f.Seek(from, io.SeekStart)
	Expect(err).NotTo(HaveOccurred())
	var r io.Reader = f
	if to >= 0 {
		r = io.LimitReader(f, to-from)
	}
	data, err := io.ReadAll(r)
	Expect(err).NotTo(HaveOccurred())
	// Only whole lines: the API server may be writing the last one.
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var out []write
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		Expect(json.Unmarshal(sc.Bytes(), &ev)).To(Succeed())
		if ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil {
			continue
		}
		user := ev.User.Username
		if ev.ImpersonatedUser != nil {
			user = ev.ImpersonatedUser.Username
		}
		w := write{At: ev.StageTimestamp.Time, User: user, Verb: ev.Verb, Group: ev.ObjectRef.APIGroup,
			Resource: ev.ObjectRef.Resource, Sub: ev.ObjectRef.Subresource,
			Namespace: ev.ObjectRef.Namespace, Name: ev.ObjectRef.Name, writer: writerOf(user)}
		if ev.ResponseStatus != nil {
			w.Code = ev.ResponseStatus.Code
		}
		if ev.RequestObject != nil {
			w.Body = ev.RequestObject.Raw
		}
		if ev.ResponseObject != nil {
			w.Response = ev.ResponseObject.Raw
		}
		w.Manager = fieldManager(ev.RequestURI, ev.UserAgent)
		out = append(out, w)
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return out, from + int64(len(data))
}

// fieldManager is a write's field manager, as the API server takes it: the
// request's fieldManager, or else its user agent up to the first slash.
func fieldManager(requestURI, userAgent string) string {
	if u, err := url.Parse(requestURI); err == nil {
		if m := u.Query().Get("fieldManager"); m != "" {
			return m
		}
	}
	m, _, _ := strings.Cut(userAgent, "/")
	return m
}

// periodic writes are not the lease's: the agent's heartbeat Lease and the
// API server's own identity Lease, renewed on a timer; the agent's token,
// renewed at half its life.
func periodic(w write) bool {
	return w.Resource == "leases" && w.Group == "coordination.k8s.io" ||
		w.Resource == "serviceaccounts" && w.Sub == "token"
}

// quiesce waits until the API server has taken no write but periodic ones
// for quiet, and returns the audit log's offset then.
func quiesce(from int64, quiet time.Duration) int64 {
	GinkgoHelper()
	var last time.Time
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, next := readAudit(from)
		from = next
		for _, w := range ws {
			if !periodic(w) {
				last = time.Now()
			}
		}
		if last.IsZero() {
			last = time.Now()
		}
		if time.Since(last) >= quiet {
			return from
		}
		Expect(time.Now().Before(deadline)).To(BeTrue(), "the cluster never went quiet")
		time.Sleep(50 * time.Millisecond)
	}
}

// requestTotals reads apiserver_request_total's write verbs from the API
// server's /metrics, as the administrator (system:masters), summed by
// resource[/subresource] and verb over codes and scopes.
func requestTotals() map[string]float64 {
	GinkgoHelper()
	hc, err := rest.HTTPClientFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
	resp, err := hc.Get(strings.TrimSuffix(env.Config.Host, "/") + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		Expect(ok).To(BeTrue(), line)
		l := parseLabels(labels)
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		Expect(err).NotTo(HaveOccurred(), line)
		w := write{Group: l["group"], Resource: l["resource"], Sub: l["subresource"]}
		out[w.key()+" "+l["verb"]] += v
	}
	return out
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		name, rest, _ := strings.Cut(s, `="`)
		var val strings.Builder
		i := 0
		for ; i < len(rest); i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				val.WriteByte(rest[i])
				continue
			}
			if rest[i] == '"' {
				break
			}
			val.WriteByte(rest[i])
		}
		out[name] = val.String()
		s = strings.TrimPrefix(rest[min(i+1, len(rest)):], ",")
	}
	return out
}

// diff is after minus before, without the zeros.
func diff(before, after map[string]float64) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := int(v - before[k]); d != 0 {
			out[k] = d
		}
	}
	return out
}

// httpVerb is the metrics' verb of an audit log's write.
func httpVerb(w write) string {
	switch w.Verb {
	case "create":
		return "POST"
	case "update":
		return "PUT"
	case "patch":
		if applied(w) {
			return "APPLY" // server-side apply, as the API server's metrics name it
		}
		return "PATCH"
	case "delete":
		return "DELETE"
	case "deletecollection":
		return "DELETECOLLECTION"
	}
	return strings.ToUpper(w.Verb)
}

// applied: a patch that is a server-side apply, whose body is an object
// that names its kind (a merge patch's names only the fields it changes).
func applied(w write) bool {
	var top struct{ APIVersion, Kind string }
	return json.Unmarshal(w.Body, &top) == nil && top.APIVersion != "" && top.Kind != ""
}

// table prints counts sorted by key.
func table(title string, m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d):\n", title, total)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-70s %3d\n", k, m[k])
	}
	return b.String()
}
