package kubelet

import "net/http"

// routes are the kubelet API's paths that the agent serves. Anything else
// is a 404, after authorization: /portForward, /run, /pods, /stats and
// the rest are not served.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "404 page not found: the MacRack agent serves exec, containerLogs and healthz only", http.StatusNotFound)
	})
	return mux
}
