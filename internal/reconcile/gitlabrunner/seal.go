package gitlabrunner

import (
	"encoding/json"
	"fmt"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// sealConfig seals what the slot's guest needs to run one job, the token
// included, to the chassis' guest key, bound to the instance's name and
// node: only that chassis' agent can open it, and only for that instance.
func sealConfig(s *scope, ps *workloadsv1alpha1.PoolSlot, instance string) (*computev1alpha1.SealedGuestConfig, error) {
	runner := s.runner
	cfg := guest.Config{Version: 1, Runner: &guest.RunnerConfig{
		URL: runner.Spec.GitLab.URL, Token: s.token, SystemID: ps.SystemID,
		CABundle: runner.Spec.GitLab.CABundle, Tags: runner.Spec.Tags,
		MaxJobDuration: guest.Duration(runner.Spec.MaxJobDuration.Duration),
	}}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("the runner's guest config: %w", err)
	}
	plain, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding the guest config: %w", err)
	}
	defer clear(plain)
	return sealing.Seal(*s.node.Status.Reported.GuestKey,
		sealing.Binding{Namespace: runner.Namespace, Name: instance, NodeName: s.node.Name}, plain)
}
