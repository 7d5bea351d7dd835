package admission

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// WebhookEnforcement is where the validating webhook enforces a rule. The
// handler asks the engine about every write it receives, so it enforces
// each rule whose kinds it receives (its +kubebuilder:webhook markers);
// the matrix's cell names those resources.
var WebhookEnforcement = []enforcement.Point{
	webhookPoint("lease.floor", "test/envtest/leases/reject_table_test.go", "refuses a 23h lease with lease.floor, admits 24h, and defaults an unset duration to 24h"),
	webhookPoint("lease.release", "test/envtest/leases/reject_table_test.go", "gives Held: the chassis keeps the tenant, takes no one else, and the tenant cannot pull the finalizer"),
	webhookPoint("instance.cap", "test/envtest/leases/reject_table_test.go", "refuses a third live instance with instance.cap, counting a Stopping one, and admits it once one has Stopped"),
	webhookPoint("instance.cap", "test/envtest/exactcap/exactcap_test.go", "admits exactly 2 of 50 parallel creates on one lease of a 2-VM class, through two webhook replicas, and refuses every other with instance.cap"),
	webhookPoint("instance.tenant", "test/envtest/leases/reject_table_test.go", "binds only a chassis of its own, cannot start instances in a Held lease, and cannot write status"),
	webhookPoint("tenancy.serial", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/tenancy.serial"),
	webhookPoint("node.commercial", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/node.commercial"),
	webhookPoint("quota.never-circumvent", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/quota.never-circumvent"),
	webhookPoint("instance.image", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/instance.image"),
	webhookPoint("instance.wipe", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/instance.wipe"),
	webhookPoint("agent.scope", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/agent.scope"),
	webhookPoint("quarantine.fence", "test/envtest/leases/reject_table_test.go", "refuses a new instance with quarantine.fence while its chassis is Quarantined, and admits the same instance once the chassis is healthy"),
	webhookPoint("quarantine.fence", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/quarantine.fence"),
	webhookPoint("audit.finalizer", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/audit.finalizer"),
	webhookPoint("tenancy.class", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/tenancy.class"),
	webhookPoint("runner.secret", "internal/admission/validator_test.go", "TestEachRuleAtTheWebhookAlone/runner.secret"),
	webhookPoint("runner.secret", "test/envtest/runnersecret/runnersecret_test.go", "refuses a tenant who cannot read the Secret, naming runner.secret, and admits one who can"),
	webhookPoint("runner.secret", "test/envtest/runnersecret/runnersecret_test.go", "refuses changes to url, caBundle or tokenSecretRef by a requester who cannot read the Secret, and admits an unrelated change"),
}

func webhookPoint(rule, file, test string) enforcement.Point {
	return enforcement.Point{Rule: rule, Layer: enforcement.Webhook, Proof: enforcement.Proof{File: file, Test: test}}
}

// VAPProof is the test that proves the ValidatingAdmissionPolicies this
// package applies, with no webhook installed: it replays every vector of
// each rule with a CEL twin through a real kube-apiserver.
var VAPProof = enforcement.Proof{File: "test/envtest/vap/replay_test.go", Test: "The generated ValidatingAdmissionPolicies, with no webhook installed"}
