package images

import (
	"os"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/opencontainers/go-digest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

func chunkDigests(g *golden.Golden) []string {
	out := make([]string, 0, len(g.Chunks))
	for _, c := range g.Chunks {
		out = append(out, c.Layer.Digest.String())
	}
	return out
}

var _ = Describe("Pulling a golden on demand", Ordered, func() {
	const image = "img-ondemand"
	var (
		proxy  *blobProxy
		g      *golden.Golden
		chunks []string
		first  *computev1alpha1.MacOSInstance
	)

	BeforeAll(func() {
		mainChassis()
		srv, err := env.Registry()
		Expect(err).NotTo(HaveOccurred())
		// Four chunks, each fetched through a proxy that counts them.
		ref, err := env.PushGoldenSized(ctx, image, 4*harness.SimGoldenChunk, harness.SimGoldenChunk, goldenMinimumDisk)
		Expect(err).NotTo(HaveOccurred())
		g, err = harness.ResolveGolden(ctx, ref, golden.RemoteOptions{PlainHTTP: true})
		Expect(err).NotTo(HaveOccurred())
		chunks = chunkDigests(g)
		Expect(chunks).To(HaveLen(4))
		proxy = newBlobProxy(srv.Host())
		createImage(image, strings.Replace(ref, srv.Host(), proxy.Host(), 1), nil)
		Eventually(resolvedCondition(image)).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(proxy.Fetches(chunks...)).To(BeZero(), "resolving reads no chunk, and nothing pulls before an instance asks")
		DeferCleanup(func() {
			for _, n := range []string{"od-1", "od-2"} {
				removeInstance(instance(mainTenant.Namespace, n, mainLease.Name, image))
			}
		})
	})

	It("pulls the golden when the first instance asks, through Pulling to Running, and reports the verified copy", func() {
		rw := watchRuntimes(mainTenant.Namespace)
		first = instance(mainTenant.Namespace, "od-1", mainLease.Name, image)
		Expect(mainTenant.Client.Create(ctx, first)).To(Succeed())
		Eventually(phaseOf(first), "60s").Should(Equal(computev1alpha1.VMRunning))
		// The watch may deliver Running after the read above saw it.
		Eventually(func() []computev1alpha1.RuntimeStatus { return rw.of(first.Name) }).
			Should(ContainElement(HaveField("Phase", computev1alpha1.VMRunning)), "the watch shows Running")

		seen := rw.of(first.Name)
		pulling := slices.IndexFunc(seen, func(rt computev1alpha1.RuntimeStatus) bool {
			return rt.Phase == computev1alpha1.VMPulling
		})
		running := slices.IndexFunc(seen, func(rt computev1alpha1.RuntimeStatus) bool {
			return rt.Phase == computev1alpha1.VMRunning
		})
		Expect(pulling).To(BeNumerically(">=", 0), "the instance never showed Pulling: %v", seen)
		Expect(pulling).To(BeNumerically("<", running), "Pulling came after Running: %v", seen)
		Expect(seen[pulling].PullPercent).NotTo(BeNil(), "Pulling without pullPercent")
		Expect(*seen[pulling].PullPercent).To(BeNumerically("<=", 100))
		Expect(seen[pulling].Message).To(ContainSubstring("pulling golden " + image))

		Eventually(reported(mainAgent.Node, image)).Should(And(
			HaveField("Phase", fleetv1alpha1.ImageReady),
			HaveField("Digest", g.Manifest.Digest.String()),
			HaveField("BytesTotal", BeNumerically(">", 0))))
		r := reported(mainAgent.Node, image)()
		Expect(r.BytesDone).To(Equal(r.BytesTotal))
		Eventually(replicatedOn(image)).Should(ContainElement(mainAgent.Serial))
		Expect(proxy.Fetches(chunks...)).To(Equal(len(chunks)), "each chunk is fetched once")
	})

	It("runs a second instance from the cache, without a second download", func() {
		before := proxy.Fetches(chunks...)
		Expect(before).To(Equal(len(chunks)), "positive control: the proxy saw the first pull")
		rw := watchRuntimes(mainTenant.Namespace)
		second := instance(mainTenant.Namespace, "od-2", mainLease.Name, image)
		Expect(mainTenant.Client.Create(ctx, second)).To(Succeed())
		Eventually(phaseOf(second), "60s").Should(Equal(computev1alpha1.VMRunning))
		Expect(rw.of(second.Name)).NotTo(ContainElement(HaveField("Phase", computev1alpha1.VMPulling)),
			"the second instance waited on a pull")
		Expect(proxy.Fetches(chunks...)).To(Equal(before), "a chunk was fetched again")
		Expect(reported(mainAgent.Node, image)()).To(HaveField("Phase", fleetv1alpha1.ImageReady))
		Expect(phaseOf(first)()).To(Equal(computev1alpha1.VMRunning))
	})
})

var _ = Describe("A golden with a corrupted chunk in the registry", Ordered, func() {
	BeforeAll(mainChassis)

	It("fails the pull naming the chunk and both digests, keeps the instance Pulling, and lists no replica", func() {
		srv, err := env.Registry()
		Expect(err).NotTo(HaveOccurred())
		ref, err := env.PushGolden(ctx, "img-corrupt", goldenMinimumDisk)
		Expect(err).NotTo(HaveOccurred())
		g, err := harness.ResolveGolden(ctx, ref, golden.RemoteOptions{PlainHTTP: true})
		Expect(err).NotTo(HaveOccurred())
		bad := g.Chunks[1]
		blob := srv.BlobPath(bad.Layer.Digest.String())
		data, err := os.ReadFile(blob)
		Expect(err).NotTo(HaveOccurred())
		Expect(int64(len(data))).To(Equal(bad.Layer.Size))
		// Past the frame header, size unchanged: only the digest can tell.
		data[len(data)-1] ^= 0xff
		data[len(data)/2] ^= 0xff
		Expect(os.WriteFile(blob, data, 0o644)).To(Succeed())
		got := digest.FromBytes(data)

		createImage("img-corrupt", ref, nil)
		Eventually(resolvedCondition("img-corrupt")).Should(HaveField("Status", metav1.ConditionTrue), "the operator reads no chunk")
		pushAndResolve("img-intact", nil)

		corrupt := instance(mainTenant.Namespace, "corrupt", mainLease.Name, "img-corrupt")
		intact := instance(mainTenant.Namespace, "intact", mainLease.Name, "img-intact")
		Expect(mainTenant.Client.Create(ctx, corrupt)).To(Succeed())
		Expect(mainTenant.Client.Create(ctx, intact)).To(Succeed())
		DeferCleanup(removeInstance, corrupt)
		DeferCleanup(removeInstance, intact)

		Eventually(reported(mainAgent.Node, "img-corrupt")).Should(And(
			HaveField("Phase", fleetv1alpha1.ImageFailed),
			HaveField("Message", And(ContainSubstring("chunk 1"), ContainSubstring("digest mismatch"),
				ContainSubstring("want "+bad.Layer.Digest.String()), ContainSubstring("got "+got.String())))))
		Eventually(runtimeOf(corrupt)).Should(And(
			HaveField("Phase", computev1alpha1.VMPulling),
			HaveField("Message", And(ContainSubstring("the pull of golden img-corrupt failed"), ContainSubstring("chunk 1")))))
		Consistently(phaseOf(corrupt), "3s").Should(Equal(computev1alpha1.VMPulling), "an instance of a corrupt golden ran")
		Expect(replicatedOn("img-corrupt")()).NotTo(ContainElement(mainAgent.Serial))

		// Positive control: the golden beside it, on the same chassis.
		Eventually(phaseOf(intact), "60s").Should(Equal(computev1alpha1.VMRunning))
		Eventually(replicatedOn("img-intact")).Should(ContainElement(mainAgent.Serial))
		Expect(replicatedOn("img-corrupt")()).NotTo(ContainElement(mainAgent.Serial))
		Expect(phaseOf(corrupt)()).To(Equal(computev1alpha1.VMPulling))
	})
})
