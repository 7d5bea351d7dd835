package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// expectSchemaRefusal asserts that the API server refused the write as
// Invalid (422), with a cause on exactly this field path, of this type,
// whose message contains messagePart.
func expectSchemaRefusal(err error, field string, causeType metav1.CauseType, messagePart string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server admitted an object the schema must refuse")
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
	var status apierrors.APIStatus
	Expect(errors.As(err, &status)).To(BeTrue())
	details := status.Status().Details
	Expect(details).NotTo(BeNil(), "no details in %v", err)
	var fields []string
	for _, c := range details.Causes {
		fields = append(fields, string(c.Type)+" "+c.Field+": "+c.Message)
		if c.Field == field && c.Type == causeType && strings.Contains(c.Message, messagePart) {
			return
		}
	}
	Fail("no cause " + string(causeType) + " on " + field + " saying " + messagePart + "; causes: " + strings.Join(fields, "; "))
}

func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func obj(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
	return u
}

func class(name string, mutate func(spec map[string]any)) *unstructured.Unstructured {
	spec := map[string]any{"chip": "M4", "memory": "16Gi", "disk": "1T", "networkGbps": int64(10), "vmCapacity": int64(2)}
	if mutate != nil {
		mutate(spec)
	}
	return obj("fleet.macrack.io/v1alpha1", "MacNodeClass", name, spec)
}

func lease(ns, name string, mutate func(spec map[string]any)) *unstructured.Unstructured {
	spec := map[string]any{"nodeClassName": "m4-16g-1t", "minimumDuration": "24h"}
	if mutate != nil {
		mutate(spec)
	}
	u := obj("leasing.macrack.io/v1alpha1", "MacNodeLease", name, spec)
	u.SetNamespace(ns)
	return u
}

func instance(ns, name string, mutate func(spec map[string]any)) *unstructured.Unstructured {
	spec := map[string]any{"leaseName": "l1", "imageName": "img", "cpu": int64(4), "memory": "8Gi", "disk": "200Gi"}
	if mutate != nil {
		mutate(spec)
	}
	u := obj("compute.macrack.io/v1alpha1", "MacOSInstance", name, spec)
	u.SetNamespace(ns)
	return u
}

func macNode(name, serial string) *unstructured.Unstructured {
	return obj("fleet.macrack.io/v1alpha1", "MacNode", name, map[string]any{"serial": serial, "nodeClassName": "m4-16g-1t"})
}

var _ = Describe("The CRDs", func() {
	It("are the six MacRack kinds", func() {
		Expect(env.CRDNames()).To(ConsistOf(
			"macnodeclasses.fleet.macrack.io",
			"macnodes.fleet.macrack.io",
			"macosimages.fleet.macrack.io",
			"macnodeleases.leasing.macrack.io",
			"macosinstances.compute.macrack.io",
			"gitlabrunners.workloads.macrack.io",
		))
	})
})

var _ = Describe("Every sample in config/samples", func() {
	It("is accepted by the schema", func() {
		ns := newNamespace()
		var files []string
		err := filepath.WalkDir(filepath.Join(harness.RepoRoot(), "config", "samples"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
				files = append(files, p)
			}
			return err
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(files).NotTo(BeEmpty())
		kinds := map[string]bool{}
		for _, f := range files {
			data, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
					break
				} else {
					Expect(err).NotTo(HaveOccurred(), f)
				}
				if len(u.Object) == 0 {
					continue
				}
				mapping, err := k8s.RESTMapper().RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
				Expect(err).NotTo(HaveOccurred(), f)
				if mapping.Scope.Name() == "namespace" {
					u.SetNamespace(ns)
				}
				Expect(k8s.Create(ctx, u)).To(Succeed(), "sample %s", filepath.Base(f))
				kinds[u.GetKind()] = true
			}
		}
		Expect(kinds).To(HaveLen(len(env.CRDNames())), "the samples show every kind")
	})
})

var _ = Describe("The schema", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	Context("MacNodeClass.spec.vmCapacity", func() {
		It("accepts 1 and 2", func() {
			Expect(k8s.Create(ctx, class("cap-one", func(s map[string]any) { s["vmCapacity"] = int64(1) }))).To(Succeed())
			Expect(k8s.Create(ctx, class("cap-two", nil))).To(Succeed())
		})
		It("refuses 3", Label("proves:quota.never-circumvent"), func() {
			err := k8s.Create(ctx, class("cap-three", func(s map[string]any) { s["vmCapacity"] = int64(3) }))
			expectSchemaRefusal(err, "spec.vmCapacity", metav1.CauseTypeFieldValueInvalid, "less than or equal to 2")
		})
		It("refuses 0", func() {
			err := k8s.Create(ctx, class("cap-zero", func(s map[string]any) { s["vmCapacity"] = int64(0) }))
			expectSchemaRefusal(err, "spec.vmCapacity", metav1.CauseTypeFieldValueInvalid, "greater than or equal to 1")
		})
	})

	Context("MacNodeLease.spec.minimumDuration", func() {
		It("accepts duration strings such as 24h, 1440m and 36h30m", func() {
			for i, d := range []string{"24h", "1440m", "36h30m", "86400s"} {
				Expect(k8s.Create(ctx, lease(ns, "ok-"+string(rune('a'+i)), func(s map[string]any) { s["minimumDuration"] = d }))).To(Succeed(), d)
			}
		})
		DescribeTable("refuses a malformed duration", Label("proves:lease.floor"),
			func(d any) {
				err := k8s.Create(ctx, lease(ns, "malformed", func(s map[string]any) { s["minimumDuration"] = d }))
				if _, isString := d.(string); isString {
					expectSchemaRefusal(err, "spec.minimumDuration", metav1.CauseTypeFieldValueInvalid, "should match")
				} else {
					expectSchemaRefusal(err, "spec.minimumDuration", metav1.CauseTypeTypeInvalid, "string")
				}
			},
			Entry("a day unit Go does not parse", "1d"),
			Entry("words", "24 hours"),
			Entry("a bare number", "24"),
			Entry("a negative duration", "-24h"),
			Entry("seven digits of hours, more than the pattern admits", "1000000h"),
			Entry("2562048h, beyond any Go duration", "2562048h"),
			Entry("a sub-second unit", "86400000ms"),
			Entry("minutes before hours", "30m24h"),
			Entry("a number, not a string", int64(86400)),
		)
		// The schema bounds the duration, so that no value beyond Go's
		// durations (2562047h) reaches an engine; lease.floor's 87600h
		// maximum is the policies' (see test/policy/lease_floor.yaml).
		It("refuses 3000000h, and admits 87600h, the ten-year maximum", func() {
			err := k8s.Create(ctx, lease(ns, "huge", func(s map[string]any) { s["minimumDuration"] = "3000000h" }))
			expectSchemaRefusal(err, "spec.minimumDuration", metav1.CauseTypeFieldValueInvalid, "should match")
			Expect(k8s.Create(ctx, lease(ns, "ten-years", func(s map[string]any) { s["minimumDuration"] = "87600h" }))).To(Succeed(),
				"positive control: 87600h is within the pattern")
		})
		It("refuses a missing minimumDuration, because the schema has no default", func() {
			err := k8s.Create(ctx, lease(ns, "missing", func(s map[string]any) { delete(s, "minimumDuration") }))
			expectSchemaRefusal(err, "spec.minimumDuration", metav1.CauseTypeFieldValueRequired, "Required value")
		})
	})

	Context("MacNodeLease.spec.nodeClassName", func() {
		// bind writes the status the lease controller writes when it claims a
		// chassis, as the administrator, through the status subresource.
		bind := func(l *unstructured.Unstructured) {
			GinkgoHelper()
			Expect(unstructured.SetNestedMap(l.Object, map[string]any{
				"phase": "Bound", "nodeName": "c02xl0ghjgh5", "serial": "C02XL0GHJGH5",
				"boundAt": "2026-06-01T00:00:00Z", "earliestReleaseAt": "2026-06-02T00:00:00Z",
			}, "status")).To(Succeed())
			Expect(k8s.Status().Update(ctx, l)).To(Succeed(), "binding the lease as the operator would")
		}
		It("may change while the lease is pending", func() {
			l := lease(ns, "pending", nil)
			Expect(k8s.Create(ctx, l)).To(Succeed())
			Expect(unstructured.SetNestedField(l.Object, "m4-pro-32g-2t", "spec", "nodeClassName")).To(Succeed())
			Expect(k8s.Update(ctx, l)).To(Succeed(), "a lease without a status changes class")
			Expect(unstructured.SetNestedMap(l.Object, map[string]any{"phase": "Pending"}, "status")).To(Succeed())
			Expect(k8s.Status().Update(ctx, l)).To(Succeed())
			Expect(unstructured.SetNestedField(l.Object, "m4-16g-1t", "spec", "nodeClassName")).To(Succeed())
			Expect(k8s.Update(ctx, l)).To(Succeed(), "a Pending lease changes class")
		})
		It("is immutable once the lease is bound", Label("proves:instance.cap"), func() {
			l := lease(ns, "bound", nil)
			Expect(k8s.Create(ctx, l)).To(Succeed())
			bind(l)
			changed := l.DeepCopy()
			Expect(unstructured.SetNestedField(changed.Object, "m4-pro-32g-2t", "spec", "nodeClassName")).To(Succeed())
			err := k8s.Update(ctx, changed)
			expectSchemaRefusal(err, "spec.nodeClassName", metav1.CauseTypeFieldValueInvalid, "spec.nodeClassName is immutable once the lease is bound")

			// Positive control: the bound lease takes other changes.
			Expect(unstructured.SetNestedField(l.Object, "72h", "spec", "minimumDuration")).To(Succeed())
			l.SetLabels(map[string]string{"team": "ios"})
			Expect(k8s.Update(ctx, l)).To(Succeed(), "a bound lease is lengthened and relabelled")
		})
	})

	Context("MacNode.spec.serial", func() {
		It("accepts a MacNode named after its serial in lower case, and later updates of other fields", func() {
			n := macNode("c02xl0ghjgh1", "C02XL0GHJGH1")
			Expect(k8s.Create(ctx, n)).To(Succeed())
			Expect(unstructured.SetNestedField(n.Object, "m4-pro", "spec", "nodeClassName")).To(Succeed())
			Expect(k8s.Update(ctx, n)).To(Succeed())
		})
		It("refuses a changed serial", Label("proves:tenancy.serial"), func() {
			n := macNode("c02xl0ghjgh2", "C02XL0GHJGH2")
			Expect(k8s.Create(ctx, n)).To(Succeed())
			Expect(unstructured.SetNestedField(n.Object, "C02XL0GHJGH9", "spec", "serial")).To(Succeed())
			err := k8s.Update(ctx, n)
			expectSchemaRefusal(err, "spec.serial", metav1.CauseTypeFieldValueInvalid, "serial is immutable")
		})
		It("refuses a removed serial", func() {
			n := macNode("c02xl0ghjgh3", "C02XL0GHJGH3")
			Expect(k8s.Create(ctx, n)).To(Succeed())
			unstructured.RemoveNestedField(n.Object, "spec", "serial")
			err := k8s.Update(ctx, n)
			expectSchemaRefusal(err, "spec.serial", metav1.CauseTypeFieldValueRequired, "Required value")
		})
		It("refuses a MacNode whose name is not its serial in lower case", Label("proves:tenancy.serial"), func() {
			err := k8s.Create(ctx, macNode("some-other-name", "C02XL0GHJGH4"))
			expectSchemaRefusal(err, "spec.serial", metav1.CauseTypeFieldValueInvalid, "metadata.name must be spec.serial in lower case")
		})
		It("refuses a serial that is not as Apple prints it", func() {
			err := k8s.Create(ctx, macNode("c02xl0ghjgh5x", "c02xl0ghjgh5x"))
			expectSchemaRefusal(err, "spec.serial", metav1.CauseTypeFieldValueInvalid, "should match")
		})
	})

	Context("MacNode.status.slots", func() {
		slots := func(n int) []any {
			out := make([]any, n)
			for i := range out {
				out[i] = map[string]any{"namespace": "t", "name": fmt.Sprintf("ci-%d", i), "uid": fmt.Sprintf("uid-%d", i)}
			}
			return out
		}
		It("refuses a third slot", Label("proves:instance.cap"), func() {
			n := macNode("c02xl0ghjgh6", "C02XL0GHJGH6")
			Expect(k8s.Create(ctx, n)).To(Succeed())
			Expect(unstructured.SetNestedSlice(n.Object, slots(2), "status", "slots")).To(Succeed())
			Expect(k8s.Status().Update(ctx, n)).To(Succeed(), "positive control: two slots")
			Expect(unstructured.SetNestedSlice(n.Object, slots(3), "status", "slots")).To(Succeed())
			err := k8s.Status().Update(ctx, n)
			expectSchemaRefusal(err, "status.slots", metav1.CauseTypeTooMany, "must have at most 2 items")
		})
	})

	Context("GitLabRunner.spec.gitlab.tokenSecretRef.key", func() {
		runner := func(name string, ref map[string]any) *unstructured.Unstructured {
			u := obj("workloads.macrack.io/v1alpha1", "GitLabRunner", name, map[string]any{
				"leaseName": "l1", "imageName": "img", "template": map[string]any{"cpu": int64(4), "memory": "8Gi", "disk": "200Gi"},
				"gitlab": map[string]any{"url": "https://gitlab.com", "tokenSecretRef": ref}})
			u.SetNamespace(ns)
			return u
		}
		It("refuses a key other than token", Label("proves:runner.secret"), func() {
			err := k8s.Create(ctx, runner("other-key", map[string]any{"name": "db", "key": "password"}))
			expectSchemaRefusal(err, "spec.gitlab.tokenSecretRef.key", metav1.CauseTypeFieldValueInvalid, `key must be "token"`)
			// The positive controls: the documented key, and none, which
			// defaults to it.
			named := runner("token-key", map[string]any{"name": "runner-token", "key": workloadsv1alpha1.RunnerTokenKey})
			Expect(k8s.Create(ctx, named)).To(Succeed())
			unset := runner("no-key", map[string]any{"name": "runner-token"})
			Expect(k8s.Create(ctx, unset)).To(Succeed())
			key, _, _ := unstructured.NestedString(unset.Object, "spec", "gitlab", "tokenSecretRef", "key")
			Expect(key).To(Equal(workloadsv1alpha1.RunnerTokenKey))
		})
	})

	Context("MacOSInstance.spec.leaseName", func() {
		It("refuses a changed leaseName", Label("proves:instance.tenant"), func() {
			i := instance(ns, "moved", nil)
			Expect(k8s.Create(ctx, i)).To(Succeed())
			i.SetLabels(map[string]string{"team": "ios"})
			Expect(k8s.Update(ctx, i)).To(Succeed(), "positive control: its labels change")
			Expect(unstructured.SetNestedField(i.Object, "l2", "spec", "leaseName")).To(Succeed())
			err := k8s.Update(ctx, i)
			expectSchemaRefusal(err, "spec.leaseName", metav1.CauseTypeFieldValueInvalid, "leaseName is immutable")
		})
	})

	Context("MacOSInstance.spec", func() {
		// Every field of the spec, with a value the schema admits on a new
		// instance. A field added to the spec and not to the immutability
		// rule (only spec.access may change) fails here.
		changes := map[string]any{"leaseName": "l2", "imageName": "other", "cpu": int64(64), "memory": "4Ti", "disk": "1Ki",
			"guestConfig": map[string]any{"keyID": "0123456789abcdef", "sealed": "AAAA"}}
		It("refuses a change to every spec field but access", func() {
			for _, f := range reflect.VisibleFields(reflect.TypeFor[computev1alpha1.MacOSInstanceSpec]()) {
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "access" {
					continue // the tenant's keys: see MacOSInstance.spec.access
				}
				Expect(changes).To(HaveKey(name), "spec.%s is new: name it in the immutability rule, and here", name)
			}
			for field, value := range changes {
				i := instance(ns, "fixed-"+strings.ToLower(field), nil)
				Expect(k8s.Create(ctx, i)).To(Succeed())
				changed := i.DeepCopy()
				Expect(unstructured.SetNestedField(changed.Object, value, "spec", field)).To(Succeed())
				err := k8s.Update(ctx, changed)
				Expect(err).To(HaveOccurred(), "spec.%s changed", field)
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), "spec.%s: want the schema's 422, got %v", field, err)
				Expect(err.Error()).To(Or(ContainSubstring("spec is immutable once created"), ContainSubstring("guestConfig is set at creation"),
					ContainSubstring("leaseName is immutable")), "spec.%s", field)
				By("positive control: the same instance's labels change")
				i.SetLabels(map[string]string{"team": "ios"})
				Expect(k8s.Update(ctx, i)).To(Succeed())
			}
		})
	})

	Context("MacOSInstance.spec.access", func() {
		const (
			alice = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVzZXJzLWtleS1pcy1ub3QtYS1zZWNyZXQtYXQtYWxs alice@laptop"
			bob   = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= bob"
			carol = "sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t"
		)
		keys := func(k ...string) map[string]any {
			list := make([]any, len(k))
			for i := range k {
				list[i] = k[i]
			}
			return map[string]any{"sshAuthorizedKeys": list}
		}
		setAccess := func(i *unstructured.Unstructured, access map[string]any) {
			GinkgoHelper()
			if access == nil {
				unstructured.RemoveNestedField(i.Object, "spec", "access")
				return
			}
			Expect(unstructured.SetNestedField(i.Object, access, "spec", "access")).To(Succeed())
		}

		It("may be set, changed and removed after creation, alone", func() {
			i := instance(ns, "keys-change", nil)
			Expect(k8s.Create(ctx, i)).To(Succeed())
			for _, access := range []map[string]any{keys(alice), keys(alice, bob, carol), keys(bob), {}, nil, keys(carol)} {
				setAccess(i, access)
				Expect(k8s.Update(ctx, i)).To(Succeed(), "spec.access %v", access)
			}
			got := &computev1alpha1.MacOSInstance{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(i), got)).To(Succeed())
			Expect(got.Spec.SSHAuthorizedKeys()).To(Equal([]string{carol}))

			By("the rest of the spec stays immutable beside it")
			setAccess(i, keys(alice))
			Expect(unstructured.SetNestedField(i.Object, int64(8), "spec", "cpu")).To(Succeed())
			err := k8s.Update(ctx, i)
			expectSchemaRefusal(err, "spec", metav1.CauseTypeFieldValueInvalid, "spec is immutable once created")
		})

		DescribeTable("refuses a key that is not one line of an OpenSSH public key",
			func(key string) {
				const msg = "each key is one line of an OpenSSH public key"
				err := k8s.Create(ctx, instance(ns, "keys-bad", func(s map[string]any) { s["access"] = keys(alice, key) }))
				expectSchemaRefusal(err, "spec.access.sshAuthorizedKeys[1]", metav1.CauseTypeFieldValueInvalid, msg)

				By("on an update too, and the same instance takes a good key (positive control)")
				i := instance(ns, "keys-later", nil)
				Expect(k8s.Create(ctx, i)).To(Succeed())
				DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, i))).To(Succeed()) })
				setAccess(i, keys(key))
				expectSchemaRefusal(k8s.Update(ctx, i), "spec.access.sshAuthorizedKeys[0]", metav1.CauseTypeFieldValueInvalid, msg)
				setAccess(i, keys(alice))
				Expect(k8s.Update(ctx, i)).To(Succeed())
			},
			Entry("two keys in one", alice+"\n"+bob),
			Entry("a trailing newline", alice+"\n"),
			Entry("authorized_keys options", `from="10.0.0.0/8",no-pty `+alice),
			Entry("a DSA key", "ssh-dss AAAAB3NzaC1kc3MAAACBAP alice"),
			Entry("no key after the type", "ssh-ed25519"),
			Entry("no space after the type", "ssh-ed25519AAAAC3NzaC1lZDI1NTE5"),
			Entry("a key that is not base64", "ssh-ed25519 AAAA$$$$ alice"),
			Entry("a private key", "-----BEGIN OPENSSH PRIVATE KEY-----"),
			Entry("nothing", ""),
		)

		It("refuses a 33rd key and a key over 8192 characters", func() {
			many := make([]string, 33)
			for n := range many {
				many[n] = alice
			}
			err := k8s.Create(ctx, instance(ns, "keys-many", func(s map[string]any) { s["access"] = keys(many...) }))
			expectSchemaRefusal(err, "spec.access.sshAuthorizedKeys", metav1.CauseTypeTooMany, "must have at most 32 items")
			long := "ssh-rsa " + strings.Repeat("A", 8192-len("ssh-rsa "))
			Expect(k8s.Create(ctx, instance(ns, "keys-long-ok", func(s map[string]any) { s["access"] = keys(long) }))).
				To(Succeed(), "positive control: 8192 characters")
			err = k8s.Create(ctx, instance(ns, "keys-long", func(s map[string]any) { s["access"] = keys(long + "A") }))
			expectSchemaRefusal(err, "spec.access.sshAuthorizedKeys[0]", metav1.CauseTypeTooLong, "may not be more than 8192")
		})
	})

	Context("quantities", func() {
		It("accept the quantity forms 16Gi, 1T, 1000000000000 and 1e12", func() {
			for i, disk := range []any{"1T", int64(1000000000000), "1e12", "931Gi"} {
				Expect(k8s.Create(ctx, class("q-ok-"+string(rune('a'+i)), func(s map[string]any) { s["disk"] = disk }))).To(Succeed(), "%v", disk)
			}
			Expect(k8s.Create(ctx, instance(ns, "q-ok", nil))).To(Succeed())
		})
		DescribeTable("refuse a negative or malformed quantity", Label("proves:node.commercial", "proves:instance.image"),
			func(build func() client.Object, field, message string) {
				expectSchemaRefusal(k8s.Create(ctx, build()), field, metav1.CauseTypeFieldValueInvalid, message)
			},
			Entry("a negative class memory", func() client.Object {
				return class("q-neg-mem", func(s map[string]any) { s["memory"] = "-16Gi" })
			}, "spec.memory", "memory must be a positive quantity"),
			Entry("a negative integer class disk", func() client.Object {
				return class("q-neg-disk", func(s map[string]any) { s["disk"] = int64(-1) })
			}, "spec.disk", "disk must be a positive quantity"),
			Entry("a zero class disk", func() client.Object {
				return class("q-zero-disk", func(s map[string]any) { s["disk"] = "0" })
			}, "spec.disk", "disk must be a positive quantity"),
			Entry("a malformed class disk", func() client.Object {
				return class("q-bad-disk", func(s map[string]any) { s["disk"] = "1 TB" })
			}, "spec.disk", "should match"),
			Entry("a malformed instance memory", func() client.Object {
				return instance(ns, "q-bad-mem", func(s map[string]any) { s["memory"] = "8 gigs" })
			}, "spec.memory", "should match"),
			Entry("a negative instance disk", func() client.Object {
				return instance(ns, "q-neg-disk", func(s map[string]any) { s["disk"] = "-200Gi" })
			}, "spec.disk", "disk must be a positive quantity"),
		)
	})
})
