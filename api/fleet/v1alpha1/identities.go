package v1alpha1

// Where host agents live and heartbeat. Defined once, here: the enrolment,
// the agent and the operator's docs read the same names.
const (
	// HeartbeatNamespace holds the agents' heartbeat Leases, as it does
	// kubelets'.
	HeartbeatNamespace = "kube-node-lease"
	// AgentServiceAccountPrefix names each agent's ServiceAccount:
	// agent-<node>, in the agents' namespace.
	AgentServiceAccountPrefix = "agent-"
)

// KernelVMLimit is the kernel's hv_apple_isa_vm_quota: at most two macOS VMs
// run on one chassis. MacRack never asks for more, and never raises it.
const KernelVMLimit = 2
