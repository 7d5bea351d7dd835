// Package cli is macrackctl: a small dispatcher of subcommands (policy,
// version, help) built on the standard flag package, so that later groups
// (node enroll) plug in beside policy.
//
// The policy group serves compliance CI:
//
//	macrackctl policy test  [dir] [--vectors DIR]       the Rego unit tests and the shared vectors
//	macrackctl policy check -f FILE [-f FILE...] ...    raw manifests, wrapped as admission requests
//	macrackctl policy eval  [-i FILE|-]                 one policy input document
//
// Each takes --output table|json|junit. The JSON reports share an envelope
// (apiVersion macrackctl/v1, kind PolicyTestReport, PolicyCheckReport or
// PolicyEvalReport); report.go defines their fields, which only grow.
//
// Exit codes, the contract CI scripts rely on:
//
//	0  everything allowed; every test and vector passed
//	1  a policy denied a document or an input; a test or a vector failed
//	2  usage error, or unreadable or malformed input: bad flags, a missing
//	   file, malformed YAML, a document without apiVersion or kind, a kind
//	   the rules do not know, a malformed input document or vector file
//	3  the policies themselves failed to load or compile
package cli
