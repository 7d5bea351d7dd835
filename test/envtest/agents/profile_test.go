package agents

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"howett.net/plist"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/cli"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/mdm"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// profileSettings reads the agent's settings out of a .mobileconfig, as
// macOS does when it installs the profile.
func profileSettings(doc []byte) mdm.Settings {
	GinkgoHelper()
	var p struct {
		PayloadContent []struct {
			PayloadType    string `plist:"PayloadType"`
			PayloadContent map[string]struct {
				Forced []struct {
					Settings mdm.Settings `plist:"mcx_preference_settings"`
				} `plist:"Forced"`
			} `plist:"PayloadContent"`
		} `plist:"PayloadContent"`
	}
	_, err := plist.Unmarshal(doc, &p)
	Expect(err).NotTo(HaveOccurred())
	for _, pl := range p.PayloadContent {
		if pl.PayloadType == mdm.ManagedPreferencesType {
			forced := pl.PayloadContent[mdm.PreferenceDomain].Forced
			Expect(forced).To(HaveLen(1))
			return forced[0].Settings
		}
	}
	Fail("the profile has no managed preferences")
	return mdm.Settings{}
}

var _ = Describe("macrackctl node enroll --profile", func() {
	It("writes a profile whose bootstrap kubeconfig is this chassis' agent", func() {
		_, err := harness.CreateClass(ctx, admin, "m4-profile", 2)
		Expect(err).NotTo(HaveOccurred())
		serial := harness.NewSerial()
		dir := GinkgoT().TempDir()
		kubeconfig, err := env.AdminKubeconfig(dir)
		Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(dir, serial+".mobileconfig")

		var out, errOut bytes.Buffer
		Expect(cli.Main([]string{"node", "enroll", serial, "--class", "m4-profile", "--agents-namespace", agentsNamespace,
			"--profile", path, "--kubeconfig", kubeconfig}, &out, &errOut)).To(Equal(0), errOut.String())
		Expect(out.String()).To(BeEmpty(), "with --profile and no -o, no kubeconfig on stdout")
		Expect(errOut.String()).To(ContainSubstring("configuration profile " + mdm.ProfileIdentifier(serial) + " written to " + path))
		info, err := os.Stat(path)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the profile holds a token")

		doc, err := os.ReadFile(path)
		Expect(err).NotTo(HaveOccurred())
		s := profileSettings(doc)
		Expect(s.Serial).To(Equal(serial))
		Expect(s.AgentsNamespace).To(Equal(agentsNamespace))

		// The kubeconfig it carries authenticates as this chassis' agent,
		// which reads its own MacNode.
		cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(s.BootstrapKubeconfig))
		Expect(err).NotTo(HaveOccurred())
		c, err := client.New(cfg, client.Options{Scheme: admin.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		review := &authenticationv1.SelfSubjectReview{}
		Expect(c.Create(ctx, review)).To(Succeed())
		node := strings.ToLower(serial)
		Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + agentsNamespace + ":" + host.ServiceAccountName(node)))
		// The operator grants the agents' roles to their group once it
		// sees agent.scope in force, which may be after the enrolment.
		Expect(enroll.WaitForRoles(ctx, admin, agentsNamespace, node, 30*time.Second)).To(Succeed())
		Expect(c.Get(ctx, client.ObjectKey{Name: node}, &fleetv1alpha1.MacNode{})).To(Succeed())
	})
})
