// Package gitlab is a small client for the GitLab runner API, the five
// endpoints a one-job runner needs:
//
//	POST   /api/v4/runners/verify     200 {id, token, token_expires_at}; 403 token revoked or wrong
//	DELETE /api/v4/runners/managers   204; 403; 404 no such manager (system_id)
//	POST   /api/v4/jobs/request       201 a job; 204 none (X-GitLab-Last-Update); 403; 409 conflict
//	PUT    /api/v4/jobs/:id           200; 202 accepted, retry after X-GitLab-Trace-Update-Interval; 403 job not running or token wrong
//	PATCH  /api/v4/jobs/:id/trace     202 (Range: 0-<size>); 416 offset mismatch (Range: 0-<size>); 403
//
// The wire shapes are copied from gitlab-runner (network/gitlab.go,
// common/network.go, common/spec/spec.go) and checked against GitLab's own
// side (lib/api/ci/runner.rb, app/services/ci/append_build_trace_service.rb,
// app/services/ci/update_build_state_service.rb); each type names the file
// it comes from. gitlab-runner itself is neither vendored nor imported: it
// would pull in its whole executor tree.
//
// Tokens travel only in request bodies and in the RUNNER-TOKEN and
// JOB-TOKEN headers, as gitlab-runner sends them, never in URLs. No error
// or String of this package contains a token: GitLab's messages are
// reflected only as a short, sanitised excerpt with anything token-shaped
// masked.
package gitlab
