package main

import "testing"

func TestClassify(t *testing.T) {
	chain := []string{
		"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset.(*request).Finish.func1",
		"k8s.io/apiserver/pkg/endpoints/filters.withAuthentication.func1",
		"net/http.HandlerFunc.ServeHTTP",
	}
	update := append([]string{
		"k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
		"k8s.io/apiserver/pkg/endpoints/handlers.(*patcher).patchResource.func2",
	}, chain...)
	for _, c := range []struct {
		name   string
		frames []string // leaf first
		want   string
	}{
		{"a webhook call's encoding, inside an update", append([]string{"encoding/json.Marshal",
			"k8s.io/apiserver/pkg/admission/plugin/webhook/validating.(*validatingDispatcher).callHook"}, update...), "admission webhooks"},
		{"managedFields, inside an update", append([]string{"runtime.mallocgc",
			"k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Update"}, update...), "managedFields"},
		{"the etcd put of an update", append([]string{"go.etcd.io/etcd/client/v3.(*retryKVClient).Txn"}, update...), "storage write, etcd client"},
		{"a response's encoding, in the chain", append([]string{"encoding/json.Marshal",
			"k8s.io/apimachinery/pkg/runtime/serializer/versioning.(*codec).Encode"}, chain...), "request decode, response encode"},
		{"a client certificate's check", append([]string{"crypto/ecdsa.VerifyASN1",
			"k8s.io/apiserver/pkg/authentication/request/x509.(*Authenticator).AuthenticateRequest"}, chain...), "authn"},
		{"the chain alone", chain, "priority and fairness"},
		{"background marking", []string{"runtime.scanobject", "runtime.gcBgMarkWorker"}, "GC (background)"},
		{"nothing known", []string{"runtime.futex", "runtime.mstart"}, other},
	} {
		if got := classify(c.frames); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
