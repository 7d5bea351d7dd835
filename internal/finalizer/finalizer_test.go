package finalizer_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/boualleiguie/macrack-operator/internal/finalizer"
)

const mine = "macrack.io/mine"

// apiserver is a fake client whose JSON patches fail as the API server's
// do: a patch that does not apply is a 422 with the server's generic
// message (k8s.io/apiserver's handlers/patch.go), not the library's error.
func apiserver(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			err := c.Patch(ctx, obj, p, opts...)
			var status apierrors.APIStatus
			if err != nil && !errors.As(err, &status) {
				return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
			}
			return err
		},
	}).Build()
}

func configMap(finalizers ...string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", Finalizers: finalizers}}
}

func stored(t *testing.T, c client.Client) []string {
	t.Helper()
	got := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "cm"}, got); err != nil {
		t.Fatal(err)
	}
	return got.Finalizers
}

// otherWriter changes the stored object behind a reader's back.
func otherWriter(t *testing.T, c client.Client, mutate func(*corev1.ConfigMap)) {
	t.Helper()
	live := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "cm"}, live); err != nil {
		t.Fatal(err)
	}
	mutate(live)
	if err := c.Update(context.Background(), live); err != nil {
		t.Fatal(err)
	}
}

func TestAdd(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		before []string
		want   []string
	}{
		{"to none", nil, []string{mine}},
		{"after another's", []string{"other"}, []string{"other", mine}},
		{"already there", []string{mine, "other"}, []string{mine, "other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := apiserver(t, configMap(tc.before...))
			read := configMap()
			if err := c.Get(ctx, client.ObjectKeyFromObject(read), read); err != nil {
				t.Fatal(err)
			}
			if err := finalizer.Add(ctx, c, read, mine); err != nil {
				t.Fatalf("Add: %v", err)
			}
			if got := stored(t, c); !slices.Equal(got, tc.want) {
				t.Errorf("stored finalizers %v, want %v", got, tc.want)
			}
			if !slices.Equal(read.Finalizers, tc.want) {
				t.Errorf("the object passed in has %v, want the stored %v", read.Finalizers, tc.want)
			}
		})
	}
}

// The point of the package: a write of anything but the finalizers does
// not fail the patch, as a resourceVersion lock would; a write of the
// finalizers does, as a Conflict.
func TestAddRaces(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		before   []string
		other    func(*corev1.ConfigMap)
		conflict bool
		want     []string
	}{
		{"another field changed", []string{"other"}, func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"k": "v"} }, false, []string{"other", mine}},
		{"another field changed, no finalizers", nil, func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"k": "v"} }, false, []string{mine}},
		{"another finalizer added", []string{"other"}, func(cm *corev1.ConfigMap) { cm.Finalizers = append(cm.Finalizers, "third") }, true, []string{"other", "third"}},
		{"the first finalizer added", nil, func(cm *corev1.ConfigMap) { cm.Finalizers = []string{"third"} }, true, []string{"third"}},
		{"mine added meanwhile", nil, func(cm *corev1.ConfigMap) { cm.Finalizers = []string{mine} }, true, []string{mine}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := apiserver(t, configMap(tc.before...))
			read := configMap()
			if err := c.Get(ctx, client.ObjectKeyFromObject(read), read); err != nil {
				t.Fatal(err)
			}
			otherWriter(t, c, tc.other)
			err := finalizer.Add(ctx, c, read, mine)
			if got := apierrors.IsConflict(err); got != tc.conflict {
				t.Fatalf("Add: %v; conflict %t, want %t", err, got, tc.conflict)
			}
			if got := stored(t, c); !slices.Equal(got, tc.want) {
				t.Errorf("stored finalizers %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		before   []string
		other    func(*corev1.ConfigMap)
		conflict bool
		want     []string
		// also is a second finalizer taken off in the same write.
		also string
	}{
		{"the only one", []string{mine}, nil, false, nil, ""},
		{"among others", []string{"a", mine, "b"}, nil, false, []string{"a", "b"}, ""},
		{"not there", []string{"a"}, nil, false, []string{"a"}, ""},
		{"another field changed", []string{"a", mine}, func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"k": "v"} }, false, []string{"a"}, ""},
		{"one after it removed", []string{mine, "b"}, func(cm *corev1.ConfigMap) { cm.Finalizers = []string{mine} }, false, nil, ""},
		{"one before it removed", []string{"a", mine}, func(cm *corev1.ConfigMap) { cm.Finalizers = []string{mine} }, true, []string{mine}, ""},
		{"two at once, apart", []string{"a", mine, "b", "c"}, nil, false, []string{"a", "b"}, "c"},
		{"two at once, side by side", []string{"b", mine}, nil, false, nil, "b"},
		{"two at once, one of them not there", []string{"a", mine}, nil, false, []string{"a"}, "c"},
		{"two at once, the second already removed", []string{mine, "c", "d"}, func(cm *corev1.ConfigMap) { cm.Finalizers = []string{mine, "d"} }, true, []string{mine, "d"}, "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := apiserver(t, configMap(tc.before...))
			read := configMap()
			if err := c.Get(ctx, client.ObjectKeyFromObject(read), read); err != nil {
				t.Fatal(err)
			}
			if tc.other != nil {
				otherWriter(t, c, tc.other)
			}
			names := []string{mine}
			if tc.also != "" {
				names = append(names, tc.also)
			}
			err := finalizer.Remove(ctx, c, read, names...)
			if got := apierrors.IsConflict(err); got != tc.conflict || (!tc.conflict && err != nil) {
				t.Fatalf("Remove: %v; conflict %t, want %t", err, got, tc.conflict)
			}
			if got := stored(t, c); !slices.Equal(got, tc.want) {
				t.Errorf("stored finalizers %v, want %v", got, tc.want)
			}
		})
	}
}

// A reader that has not seen the deletion yet adds nothing: it gets a
// Conflict, as a resourceVersion lock gave it, not the API server's 422
// for a finalizer added to an object being deleted. The positive control
// is TestAdd: the same read, not deleted, adds it.
func TestAddToAnObjectBeingDeletedIsAConflict(t *testing.T) {
	ctx := context.Background()
	c := apiserver(t, configMap("other"))
	read := configMap()
	if err := c.Get(ctx, client.ObjectKeyFromObject(read), read); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, configMap()); err != nil {
		t.Fatal(err)
	}
	err := finalizer.Add(ctx, c, read, mine)
	if !apierrors.IsConflict(err) {
		t.Fatalf("Add to an object being deleted: %v, want a Conflict", err)
	}
	if got := stored(t, c); !slices.Equal(got, []string{"other"}) {
		t.Errorf("stored finalizers %v, want [other]", got)
	}
}
