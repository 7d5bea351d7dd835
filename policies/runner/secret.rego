# METADATA
# title: runner.secret
# description: |
#   A GitLabRunner's token is its requester's to use. The operator reads the
#   Secret that tokenSecretRef names, as the namespace's runner
#   ServiceAccount, and sends the token to gitlab.url, trusting
#   gitlab.caBundle. So whoever creates a GitLabRunner, or changes its
#   tokenSecretRef, url or caBundle (a requester's own CA could intercept an
#   allowed host), must be allowed to get that Secret themselves. The webhook
#   asks the API server with a SubjectAccessReview as the requester (user,
#   UID, groups and extra); a request whose answer is missing, or is about
#   another Secret or user, is refused.
# custom:
#   id: runner.secret
#   kinds:
#   - workloads.macrack.io/GitLabRunner
#   engines: [rego]
#   inventory:
#   - tokenSecretAccess: the SubjectAccessReview's answer, whether the requester may get the Secret tokenSecretRef names, in the runner's namespace ({namespace, name, user, allowed, reason})
package macrack.runner.secret

import data.macrack.lib

code := "runner.secret"

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "GitLabRunner"
	names_the_token
	some problem in problems
	msg := sprintf("runner.secret: %s may not create or repoint GitLabRunner %s: %s; only a requester who may get Secret %s/%s may name it in tokenSecretRef, or change gitlab.url or gitlab.caBundle", [
		lib.username, object.get(lib.new, ["metadata", "name"], "?"), problem, namespace, secret,
	])
}

# A new runner names its token; an update names it again when it changes
# which Secret is read, or where and to whom the token goes.
names_the_token if input.request.operation == "CREATE"

names_the_token if {
	input.request.operation == "UPDATE"
	some field in ["tokenSecretRef", "url", "caBundle"]
	lib.changed(["spec", "gitlab", field])
}

# answer is the webhook's SubjectAccessReview, when it asked.
answer := a if {
	a := object.get(input, ["inventory", "tokenSecretAccess"], null)
	is_object(a)
}

problems contains sprintf("the API server was not asked whether %s may get Secret %s/%s", [lib.username, namespace, secret]) if {
	not answer
}

problems contains sprintf("the access review answered about Secret %s/%s for %s, not this request's", [
	object.get(answer, "namespace", "?"), object.get(answer, "name", "?"), object.get(answer, "user", "?"),
]) if {
	answer
	not about_this_request
}

problems contains sprintf("%s may not get Secret %s/%s%s", [lib.username, namespace, secret, reason]) if {
	about_this_request
	object.get(answer, "allowed", false) != true
}

about_this_request if {
	object.get(answer, "namespace", null) == namespace
	object.get(answer, "name", null) == secret
	object.get(answer, "user", null) == lib.username
}

reason := sprintf(" (%s)", [r]) if {
	r := object.get(answer, "reason", "")
	r != ""
}

else := ""

namespace := object.get(lib.new, ["metadata", "namespace"], object.get(input.request, "namespace", ""))

secret := object.get(lib.new, ["spec", "gitlab", "tokenSecretRef", "name"], "")
