package image

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"oras.land/oras-go/v2/content"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/index"
)

// resolveTimeout bounds one resolve: a registry that accepts a connection
// and never answers must not hold the controller's worker.
const resolveTimeout = 30 * time.Second

// resolve reads the golden's manifest and config from its registry, once
// per pinned digest: the digest fixes the content, so a resolved golden is
// never read again. It returns an error only for what a retry may cure.
func (r *Reconciler) resolve(ctx context.Context, s *scope) error {
	img := s.image
	pinned, _ := golden.PinnedDigest(img.Spec.Source)
	digest := pinned.String()
	if res := img.Status.Resolved; res != nil && res.Digest == digest && img.Status.ObservedGeneration == img.Generation {
		return nil
	}
	if c := meta.FindStatusCondition(img.Status.Conditions, fleetv1alpha1.ConditionResolved); c != nil &&
		c.Reason == fleetv1alpha1.ReasonNotAGolden && c.ObservedGeneration == img.Generation {
		// The digest pins the artifact: what was not a golden never becomes one.
		s.resolveReason, s.resolveMessage = c.Reason, c.Message
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	img.Status.Resolved = nil
	var dockerConfig []byte
	if name := img.Spec.PullSecretName; name != "" {
		sec := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, sec); err != nil {
			s.resolveReason = fleetv1alpha1.ReasonPullSecretInvalid
			s.resolveMessage = fmt.Sprintf("reading pull Secret %s/%s: %v", r.Namespace, name, err)
			return fmt.Errorf("%s", s.resolveMessage)
		}
		if sec.Type != corev1.SecretTypeDockerConfigJson || len(sec.Data[corev1.DockerConfigJsonKey]) == 0 {
			s.resolveReason = fleetv1alpha1.ReasonPullSecretInvalid
			s.resolveMessage = fmt.Sprintf("pull Secret %s/%s is not of type %s with a %s key", r.Namespace, name, corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey)
			return nil
		}
		dockerConfig = sec.Data[corev1.DockerConfigJsonKey]
	}
	repo, err := golden.Repository(img.Spec.Source, golden.RemoteOptions{PlainHTTP: img.Spec.PlainHTTP, DockerConfigJSON: dockerConfig})
	if err != nil {
		s.resolveReason, s.resolveMessage = fleetv1alpha1.ReasonNotAGolden, err.Error()
		return nil
	}
	g, err := golden.Resolve(ctx, repo, img.Spec.Source)
	switch {
	case errors.Is(err, golden.ErrInvalid):
		s.resolveReason, s.resolveMessage = fleetv1alpha1.ReasonNotAGolden, err.Error()
		ctrl.LoggerFrom(ctx).Info("The image's artifact is not a golden", "MacOSImage", img.Name, "reason", err.Error())
		return nil
	case err != nil:
		s.resolveReason = fleetv1alpha1.ReasonRegistryUnreachable
		s.resolveMessage = fmt.Sprintf("resolving %s (retrying with backoff): %v", img.Spec.Source, err)
		return fmt.Errorf("resolving MacOSImage %s: %w", img.Name, err)
	}
	model, err := content.FetchAll(ctx, repo, g.HardwareModel)
	if err != nil {
		s.resolveReason = fleetv1alpha1.ReasonRegistryUnreachable
		s.resolveMessage = fmt.Sprintf("fetching the hardware model of %s (retrying with backoff): %v", img.Spec.Source, err)
		return fmt.Errorf("fetching the hardware model of MacOSImage %s: %w", img.Name, err)
	}
	img.Status.Resolved = Resolved(g, model)
	return nil
}

// Resolved is status.resolved from a golden and its hardware model.
func Resolved(g *golden.Golden, hardwareModel []byte) *fleetv1alpha1.ResolvedImage {
	var compressed int64
	compression := ""
	for _, c := range g.Chunks {
		compressed += c.Layer.Size
		compression = string(c.Compression)
	}
	return &fleetv1alpha1.ResolvedImage{
		Digest:                 g.Manifest.Digest.String(),
		MacOSVersion:           g.Config.MacOSVersion,
		XcodeVersions:          slices.Clone(g.Config.XcodeVersions),
		MinimumDisk:            *resource.NewQuantity(g.Config.MinimumDiskBytes, resource.BinarySI),
		DiskSize:               *resource.NewQuantity(g.DiskSize(), resource.BinarySI),
		CompressedSize:         *resource.NewQuantity(compressed, resource.BinarySI),
		Chunks:                 int32(len(g.Chunks)),
		Compression:            compression,
		HardwareModel:          base64.StdEncoding.EncodeToString(hardwareModel),
		HardwareModelDigest:    g.HardwareModel.Digest.String(),
		AuxiliaryStorageDigest: g.AuxiliaryStorage.Digest.String(),
	}
}

// countReplicas sets status.replicas to the number of chassis whose agents
// report a Ready copy of the resolved digest: a chassis still pulling,
// failed, or holding another digest is not a replica. It reads the count
// Replicas keeps from the informer's events, not the fleet.
func (r *Reconciler) countReplicas(s *scope) error {
	img := s.image
	if r.Replicas == nil {
		return errors.New("the image controller counts no replicas: Replicas is nil")
	}
	var n int
	if res := img.Status.Resolved; res != nil {
		n = r.Replicas.Get(index.VerifiedImageKey(img.Name, res.Digest))
	}
	img.Status.Replicas = int32(n)
	return nil
}
