package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Every macrack.io/ name MacRack writes on objects that are not its own
// kinds, defined once. The rules in policies/ spell the same strings.
const (
	// Prefix is the domain of every taint and label below.
	Prefix = "macrack.io/"

	// UnleasedTaint marks a Node whose chassis is in the pool.
	UnleasedTaint = "macrack.io/unleased"
	// LeasedTaint, with the tenant's namespace as its value, marks a leased
	// Node.
	LeasedTaint = "macrack.io/leased"
	// QuarantinedTaint (NoSchedule) marks a Node whose chassis is in the
	// quarantine loop: its kernel VM quota stuck.
	QuarantinedTaint = "macrack.io/quarantined"

	// SimQuotaStickAnnotation, on a MacNode, asks a sim agent to reproduce
	// the stuck-quota bug: its kernel keeps every stopped VM counted, and
	// the agent tries a start at once. A value it has not seen yet (a
	// timestamp, say) asks again. Only the sim driver honours it; a Mac's
	// agent ignores it. `macrackctl sim quota-stick` sets it.
	SimQuotaStickAnnotation = "sim.macrack.io/quota-stick"

	// TenantLabel names, on a leased Node, the tenant's namespace.
	TenantLabel = "macrack.io/tenant"
	// SerialLabel carries the chassis' serial, on its Node and its agent's
	// ServiceAccount and bindings.
	SerialLabel = "macrack.io/serial"
	// ClassLabel carries the chassis' MacNodeClass, on its Node.
	ClassLabel = "macrack.io/class"

	// VMResource is the Node's capacity in macOS VMs: the class's
	// vmCapacity, never above KernelVMLimit.
	VMResource corev1.ResourceName = "macrack.io/macos-vm"

	// InstanceContainer is the one container of an instance's Pod: the VM.
	// kubectl exec, logs and port-forward name it, and the host agent
	// serves no other.
	InstanceContainer = "macos"

	// DefaultLoginUser is the guest user kubectl exec runs as when the
	// MacOSImage names none: the public Tart goldens' admin.
	DefaultLoginUser = "admin"

	// InstancePodLabel marks an instance's Pod, which the operator makes in
	// the tenant's namespace: its informer caches these Pods only. A tenant
	// can write it on Pods of its own, so it selects, and never proves: the
	// operator matches a Pod to its instance by the controller reference.
	InstancePodLabel = "macrack.io/instance-pod"
	// InstanceUIDLabel names, on an instance's Pod, the instance it stands
	// for, for people and selectors; nothing trusts it.
	InstanceUIDLabel = "macrack.io/instance-uid"
	// InstancePodImage is the image of an instance's Pod's one container.
	// No kubelet runs it: the container is the VM.
	InstancePodImage = "registry.k8s.io/pause:3.10"

	// KubeletServingSigner is the signerName of the host agents'
	// CertificateSigningRequests for their kubelet API's serving
	// certificate. The operator approves and signs only a request of an
	// agent for its own Node and its enrolled address, with the CA the API
	// server verifies kubelets with (--kubelet-certificate-authority).
	KubeletServingSigner = "macrack.io/kubelet-serving"

	// DiskWipeFinalizer is the host agent's finalizer on an instance: it
	// comes off only after the instance disk is wiped (instance.wipe).
	DiskWipeFinalizer = "macrack.io/disk-wipe"
	// LeaseFinalizer is the operator's finalizer on every MacNodeLease. It
	// keeps a deleted lease, in Held, until earliestReleaseAt.
	LeaseFinalizer = "macrack.io/lease"

	// PolicyRuleLabel names, on a generated ValidatingAdmissionPolicy, the
	// rule it deploys; PolicyRevisionAnnotation and PolicySerialAnnotation
	// the bundle it came from.
	PolicyRuleLabel          = "macrack.io/rule"
	PolicyRevisionAnnotation = "macrack.io/policy-revision"
	PolicySerialAnnotation   = "macrack.io/policy-serial"
)
