package custom

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// runnerConfig is what goes into the config file gitlab-runner reads the
// job's runner from (common/config.go RunnerConfig and CustomConfig toml
// tags). The file holds the token, so it is written 0600 in the agent's
// chassis directory and removed after the job.
type runnerConfig struct {
	Name, URL, Token, CAFile string
	BuildsDir, CacheDir      string
	Stage                    string
	ConfigTimeout            time.Duration
	PrepareTimeout           time.Duration
	CleanupTimeout           time.Duration
	GracefulKillTimeout      time.Duration
	ForceKillTimeout         time.Duration
}

// toml renders c. Each stage is the one binary with its stage name as
// the first argument (config_args and the like come before gitlab-
// runner's own arguments).
func (c runnerConfig) toml() string {
	var b strings.Builder
	kv := func(indent, k, v string) { fmt.Fprintf(&b, "%s%s = %s\n", indent, k, tomlString(v)) }
	n := func(indent, k string, d time.Duration) {
		fmt.Fprintf(&b, "%s%s = %d\n", indent, k, max(1, int((d+time.Second-1)/time.Second)))
	}
	b.WriteString("concurrent = 1\n\n[[runners]]\n")
	kv("  ", "name", c.Name)
	kv("  ", "url", c.URL)
	kv("  ", "token", c.Token)
	if c.CAFile != "" {
		kv("  ", "tls-ca-file", c.CAFile)
	}
	kv("  ", "executor", "custom")
	kv("  ", "builds_dir", c.BuildsDir)
	kv("  ", "cache_dir", c.CacheDir)
	kv("  ", "shell", "bash")
	b.WriteString("  [runners.custom]\n")
	for _, s := range []string{StageConfig, StagePrepare, StageRun, StageCleanup} {
		kv("    ", s+"_exec", c.Stage)
		fmt.Fprintf(&b, "    %s_args = [%s]\n", s, tomlString(s))
	}
	n("    ", "config_exec_timeout", c.ConfigTimeout)
	n("    ", "prepare_exec_timeout", c.PrepareTimeout)
	n("    ", "cleanup_exec_timeout", c.CleanupTimeout)
	n("    ", "graceful_kill_timeout", c.GracefulKillTimeout)
	n("    ", "force_kill_timeout", c.ForceKillTimeout)
	return b.String()
}

// tomlString is s as a TOML basic string: quotes and backslashes escaped,
// control characters as \uXXXX.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\u` + strconv.FormatInt(int64(r)|0x10000, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
