package images

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// testHtpasswd is the user macrack with the password golden-secret (bcrypt,
// cost 4), as internal/golden's registry tests have it.
const testHtpasswd = "macrack:$2a$04$IlUUGsaIi/SCZqvvnaXDFOniTh9htcPeOpaaq4WXOBJiY3sBCYe.2\n"

func digestOf(ref string) string {
	_, d, _ := strings.Cut(ref, "@")
	return d
}

// deleteImageLater deletes the MacOSImage when the spec ends: an image the
// operator cannot resolve is retried, and should not be for the rest of the
// suite.
func deleteImageLater(name string) {
	DeferCleanup(func() {
		img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(client.IgnoreNotFound(admin.Delete(ctx, img))).To(Succeed())
	})
}

var _ = Describe("Resolving a MacOSImage from its registry", Ordered, func() {
	BeforeAll(mainChassis)

	It("resolves a pushed sim golden into status.resolved", func() {
		ref := pushAndResolve("img-good", nil)
		img := getImage("img-good")
		c := resolvedCondition("img-good")()
		Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonResolved))
		Expect(c.Message).To(ContainSubstring("macOS 15.5, Xcode 16.4"))
		Expect(img.Status.ObservedGeneration).To(Equal(img.Generation))
		r := img.Status.Resolved
		Expect(r).NotTo(BeNil())
		Expect(r.Digest).To(Equal(digestOf(ref)))
		Expect(r.MacOSVersion).To(Equal("15.5"))
		Expect(r.XcodeVersions).To(Equal([]string{"16.4"}))
		Expect(r.MinimumDisk.Value()).To(Equal(int64(goldenMinimumDisk)))
		Expect(r.DiskSize.Value()).To(Equal(harness.SimGoldenDisk))
		Expect(r.Chunks).To(Equal(int32(harness.SimGoldenDisk / harness.SimGoldenChunk)))
		Expect(r.Compression).To(Equal("zstd"))
		Expect(r.CompressedSize.Value()).To(BeNumerically(">", 0))
		Expect(r.HardwareModel).NotTo(BeEmpty())
		model, err := base64.StdEncoding.DecodeString(r.HardwareModel)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(model)).To(Equal("bplist00 macrack sim hardware model"), "the hardware-model layer, as pushed")
		Expect(r.HardwareModelDigest).To(HavePrefix("sha256:"))
		Expect(r.AuxiliaryStorageDigest).To(HavePrefix("sha256:"))
	})

	It("refuses an OCI artifact that is not a golden as NotAGolden, resolves nothing, and refuses instances of it at admission", func() {
		srv, err := env.Registry()
		Expect(err).NotTo(HaveOccurred())
		repoRef := srv.Host() + "/macrack/sbom"
		repo, err := golden.Repository(repoRef, golden.RemoteOptions{PlainHTTP: true})
		Expect(err).NotTo(HaveOccurred())
		layer, err := oras.PushBytes(ctx, repo, "application/vnd.example.sbom.v1+json", []byte(`{"packages":[]}`))
		Expect(err).NotTo(HaveOccurred())
		desc, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, "application/vnd.example.sbom.v1",
			oras.PackManifestOptions{Layers: []ocispec.Descriptor{layer}})
		Expect(err).NotTo(HaveOccurred())
		createImage("img-sbom", repoRef+"@"+desc.Digest.String(), nil)

		Eventually(resolvedCondition("img-sbom")).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", fleetv1alpha1.ReasonNotAGolden),
			HaveField("Message", And(ContainSubstring("not a valid MacRack golden"),
				ContainSubstring(`artifactType is "application/vnd.example.sbom.v1"`), ContainSubstring(golden.ArtifactType)))))
		Consistently(func() *fleetv1alpha1.ResolvedImage { return getImage("img-sbom").Status.Resolved }, "2s").Should(BeNil())
		Expect(getImage("img-good").Status.Resolved).NotTo(BeNil(), "positive control: the golden beside it is resolved")

		err = mainTenant.Client.Create(ctx, instance(mainTenant.Namespace, "of-sbom", mainLease.Name, "img-sbom"))
		harness.ExpectWebhookDenial(err, "vmacosinstance.macrack.io", "instance.image")
		Expect(err.Error()).To(ContainSubstring("instance.image: MacOSImage img-sbom is not resolved yet"))

		good := instance(mainTenant.Namespace, "of-good", mainLease.Name, "img-good")
		Expect(mainTenant.Client.Create(ctx, good)).To(Succeed(), "positive control: an instance of the resolved golden is admitted")
		removeInstance(good)
	})

	It("says RegistryUnreachable while the registry is down, and resolves the image once it is back", func() {
		down := startRegistry(registry.Options{})
		ref, err := harness.PushGoldenTo(ctx, down.Host(), golden.RemoteOptions{PlainHTTP: true}, "img-down",
			harness.SimGoldenDisk, harness.SimGoldenChunk, goldenMinimumDisk)
		Expect(err).NotTo(HaveOccurred())
		down.Stop()
		deleteImageLater("img-down")
		createImage("img-down", ref, nil)
		created := time.Now()
		Eventually(resolvedCondition("img-down"), "30s").Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", fleetv1alpha1.ReasonRegistryUnreachable),
			HaveField("Message", And(ContainSubstring(down.Host()), ContainSubstring("retrying")))))
		GinkgoWriter.Printf("RegistryUnreachable %s after the image was created\n", time.Since(created).Round(100*time.Millisecond))
		Consistently(func(g Gomega) {
			img := getImage("img-down")
			g.Expect(img.Status.Resolved).To(BeNil())
			g.Expect(meta.FindStatusCondition(img.Status.Conditions, fleetv1alpha1.ConditionResolved)).To(
				HaveField("Reason", fleetv1alpha1.ReasonRegistryUnreachable))
		}, "3s", "200ms").Should(Succeed(), "resolved while its registry was down")

		Expect(down.Restart()).To(Succeed())
		restarted := time.Now()
		Eventually(resolvedCondition("img-down"), "60s").Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", fleetv1alpha1.ReasonResolved)))
		took := time.Since(restarted)
		AddReportEntry("img-down resolved after the registry restarted", took.Round(100*time.Millisecond).String())
		GinkgoWriter.Printf("Resolved %s after the registry restarted\n", took.Round(100*time.Millisecond))
		Expect(getImage("img-down").Status.Resolved).To(HaveField("Digest", digestOf(ref)))
	})

	It("reads a registry that asks for credentials with the pull Secret, and says why without a Secret that works", func() {
		htpasswd := filepath.Join(GinkgoT().TempDir(), "htpasswd")
		Expect(os.WriteFile(htpasswd, []byte(testHtpasswd), 0o600)).To(Succeed())
		private := startRegistry(registry.Options{Htpasswd: htpasswd})
		dockerConfig := func(user, password string) []byte {
			return []byte(`{"auths":{"` + private.Host() + `":{"auth":"` +
				base64.StdEncoding.EncodeToString([]byte(user+":"+password)) + `"}}}`)
		}
		good := dockerConfig("macrack", "golden-secret")
		ref, err := harness.PushGoldenTo(ctx, private.Host(), golden.RemoteOptions{PlainHTTP: true, DockerConfigJSON: good},
			"img-private", harness.SimGoldenDisk, harness.SimGoldenChunk, goldenMinimumDisk)
		Expect(err).NotTo(HaveOccurred())

		secret := func(name string, typ corev1.SecretType, config []byte) {
			GinkgoHelper()
			Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.OperatorNamespace},
				Type: typ, Data: map[string][]byte{corev1.DockerConfigJsonKey: config}})).To(Succeed())
		}
		secret("registry-good", corev1.SecretTypeDockerConfigJson, good)
		secret("registry-wrong-password", corev1.SecretTypeDockerConfigJson, dockerConfig("macrack", "guess"))
		secret("registry-opaque", corev1.SecretTypeOpaque, good)

		withSecret := func(name string) func(*fleetv1alpha1.MacOSImageSpec) {
			return func(s *fleetv1alpha1.MacOSImageSpec) { s.PullSecretName = name }
		}
		for _, name := range []string{"img-private-wrong-password", "img-private-opaque", "img-private-anonymous", "img-private-missing"} {
			deleteImageLater(name)
		}
		createImage("img-private", ref, withSecret("registry-good"))
		createImage("img-private-wrong-password", ref, withSecret("registry-wrong-password"))
		createImage("img-private-opaque", ref, withSecret("registry-opaque"))
		createImage("img-private-anonymous", ref, nil)
		createImage("img-private-missing", ref, withSecret("registry-nonexistent"))

		Eventually(resolvedCondition("img-private")).Should(HaveField("Status", metav1.ConditionTrue),
			"positive control: the right credentials resolve it")
		Expect(getImage("img-private").Status.Resolved).To(HaveField("Digest", digestOf(ref)))

		unauthorized := HaveField("Message", MatchRegexp(`(?i)401|unauthorized`))
		Eventually(resolvedCondition("img-private-wrong-password")).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", fleetv1alpha1.ReasonRegistryUnreachable), unauthorized))
		// Anonymous, the client has no credential to answer the registry's
		// Basic challenge with, and says so.
		Eventually(resolvedCondition("img-private-anonymous")).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", fleetv1alpha1.ReasonRegistryUnreachable),
			HaveField("Message", MatchRegexp(`(?i)401|unauthorized|basic credential not found`))))
		Eventually(resolvedCondition("img-private-opaque")).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", fleetv1alpha1.ReasonPullSecretInvalid),
			HaveField("Message", ContainSubstring("registry-opaque is not of type kubernetes.io/dockerconfigjson"))))
		Eventually(resolvedCondition("img-private-missing")).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", fleetv1alpha1.ReasonPullSecretInvalid),
			HaveField("Message", And(ContainSubstring("registry-nonexistent"), ContainSubstring("not found")))))
		for _, name := range []string{"img-private-wrong-password", "img-private-opaque", "img-private-anonymous", "img-private-missing"} {
			Expect(getImage(name).Status.Resolved).To(BeNil(), name)
		}
	})
})
