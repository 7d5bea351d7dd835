# METADATA
# title: pod.shape
# description: |
#   The operator may create Pods in every namespace, and uses that power
#   for one shape only: an instance's Pod. It is controlled by the
#   MacOSInstance of its name and nothing else, labelled
#   macrack.io/instance-pod, bound to a Node, with one container, macos, of
#   the pause image, that requests and is limited to one
#   macrack.io/macos-vm and nothing more, runs no command and mounts,
#   exposes and reads nothing; no volumes, no host namespaces, no
#   ServiceAccount token, the restricted level's security settings, and
#   tolerations of not-ready and unreachable NoExecute only. Pods anyone
#   else creates are not concerned.
# custom:
#   id: pod.shape
#   kinds:
#   - /Pod
#   engines: [rego, cel]
#   params:
#   - operatorUsername: the operator's own identity
package macrack.pod.shape

import data.macrack.lib

code := "pod.shape"

violations contains {"code": code, "message": concat("", ["pod.shape: Pod ", name, " must ", problem])} if {
	input.request.kind.kind == "Pod"
	input.request.operation == "CREATE"
	lib.is_operator
	some problem in problems
}

problems contains sprintf("have one owner, its controller, the MacOSInstance of its name; it has %d owner(s)", [count(owners)]) if {
	not owned
}

problems contains "carry the label macrack.io/instance-pod=true and a nodeName" if {
	not labelled_and_bound
}

problems contains sprintf(
	concat("", [
		"have one container, macos, of %s, requesting and limited to one %s and nothing else, ",
		"with no command, environment, ports or mounts; it has %d container(s)",
	]),
	[image, vm, count(containers)],
) if {
	not one_vm_container
}

problems contains concat("", [
	"have no volumes, no host namespaces, no ServiceAccount token, ",
	"and tolerate only node.kubernetes.io/not-ready and unreachable NoExecute",
]) if {
	not isolated
}

problems contains "run as non-root with the RuntimeDefault seccomp profile, no privilege escalation, and every capability dropped" if {
	not restricted
}

image := "registry.k8s.io/pause:3.10"

vm := "macrack.io/macos-vm"

name := object.get(lib.new, ["metadata", "name"], "")

owners := object.get(lib.new, ["metadata", "ownerReferences"], [])

containers := object.get(lib.new, ["spec", "containers"], [])

spec(f, default_value) := object.get(lib.new, ["spec", f], default_value)

owned if {
	count(owners) == 1
	o := owners[0]
	object.get(o, "controller", false) == true
	o.apiVersion == "compute.macrack.io/v1alpha1"
	o.kind == "MacOSInstance"
	o.name == name
}

labelled_and_bound if {
	object.get(lib.new, ["metadata", "labels", "macrack.io/instance-pod"], "") == "true"
	spec("nodeName", "") != ""
}

one_vm_container if {
	count(containers) == 1
	count(spec("initContainers", [])) == 0
	count(spec("ephemeralContainers", [])) == 0
	every c in containers {
		vm_container(c)
	}
}

vm_container(c) if {
	c.name == "macos"
	c.image == image
	object.get(c, ["resources", "requests"], {}) == {vm: "1"}
	object.get(c, ["resources", "limits"], {}) == {vm: "1"}
	every f in ["command", "args", "env", "envFrom", "ports", "volumeMounts", "volumeDevices"] {
		not has_field(c, f)
	}
}

has_field(o, f) if f in object.keys(o)

isolated if {
	count(spec("volumes", [])) == 0
	spec("hostNetwork", false) == false
	spec("hostPID", false) == false
	spec("hostIPC", false) == false
	spec("automountServiceAccountToken", true) == false
	every t in spec("tolerations", []) {
		object.get(t, "key", "") in {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
		object.get(t, "effect", "") == "NoExecute"
	}
}

restricted if {
	object.get(lib.new, ["spec", "securityContext", "runAsNonRoot"], false) == true
	object.get(lib.new, ["spec", "securityContext", "seccompProfile", "type"], "") == "RuntimeDefault"
	every c in containers {
		object.get(c, ["securityContext", "allowPrivilegeEscalation"], true) == false
		object.get(c, ["securityContext", "privileged"], false) == false
		object.get(c, ["securityContext", "capabilities", "drop"], []) == ["ALL"]
		count(object.get(c, ["securityContext", "capabilities", "add"], [])) == 0
	}
}
