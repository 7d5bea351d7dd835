package custom

// The stage socket speaks HTTP/1.1 (net/http), one request at a time:
//
//	GET  /v1/probe    204 when the VM answers; 503 and the reason if not.
//	POST /v1/run      the script as the body, the gitlab-runner stage
//	                  name in HeaderStage; 200 with the output streamed
//	                  as the body, then TrailerExitCode, or TrailerError
//	                  when the VM could not run the script.
//	POST /v1/cleanup  204; the job's stages are done.
//
// Nothing else goes over it: no environment, no arguments.
const (
	pathProbe   = "/v1/probe"
	pathRun     = "/v1/run"
	pathCleanup = "/v1/cleanup"

	// HeaderStage names the run stage (build_script, after_script, …),
	// for the agent's log.
	HeaderStage = "Macrack-Stage"
	// TrailerExitCode is the script's exit code.
	TrailerExitCode = "Macrack-Exit-Code"
	// TrailerError says why the VM could not run the script.
	TrailerError = "Macrack-Error"

	// MaxScriptBytes bounds one script. gitlab-runner puts every job
	// variable into each script, so they are larger than the job's own
	// lines, but far from this.
	MaxScriptBytes = 32 << 20
	// maxErrorBytes bounds an error message read from the socket.
	maxErrorBytes = 4 << 10

	// socketHost is the Host of requests; the socket is the address.
	socketHost = "macrack-stage"
)
