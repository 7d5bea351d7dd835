package kubelet

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/streaming/pkg/httpstream"
)

// routes are the kubelet API's paths that the agent serves. Anything else
// is a 404, after authorization: /run, /pods, /stats and the rest are not
// served.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		// The API server's exec is a POST (SPDY) or a GET (WebSocket).
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", s.serveExec)
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{uid}/{container}", s.serveExec)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", s.serveAttach)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{uid}/{container}", s.serveAttach)
		// The API server's port-forward is a POST (SPDY) or a GET (WebSocket).
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", s.servePortForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", s.servePortForward)
	}
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.serveLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "404 page not found: the MacRack agent serves exec, portForward, containerLogs and healthz only", http.StatusNotFound)
	})
	return mux
}

// refuse answers a request with err: a *Refusal's code and message, or
// a 500. An upgrade's refusal (exec, attach, port-forward) is a
// metav1.Status in JSON, as the API server's own: client-go's WebSocket
// executor would read a text body with a colon in it as YAML and lose the
// message, and its SPDY clients print a Status's message. Any other
// refusal is text, as the kubelet's: the API server hands a 400's text on
// to kubectl logs as it is.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := http.StatusInternalServerError, err.Error()
	var ref *Refusal
	if errors.As(err, &ref) {
		code, msg = ref.Code, ref.Message
	}
	logr.FromContextOrDiscard(r.Context()).Info("Refused", "status", code, "reason", msg)
	if !httpstream.IsUpgradeRequest(r) {
		http.Error(w, msg, code)
		return
	}
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reasons[code],
		Code:     int32(code),
	}
	body, err := json.Marshal(status)
	if err != nil {
		http.Error(w, msg, code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// reasons are the Status reasons of the refusals' codes.
var reasons = map[int]metav1.StatusReason{
	http.StatusBadRequest:          metav1.StatusReasonBadRequest,
	http.StatusNotFound:            metav1.StatusReasonNotFound,
	http.StatusInternalServerError: metav1.StatusReasonInternalError,
}
