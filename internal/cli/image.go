package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	"oras.land/oras-go/v2/registry"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

const imageUsage = `Push and inspect golden images: OCI artifacts in an OCI registry that hold a
macOS disk in compressed chunks, its auxiliary storage and hardware model,
and the macOS and Xcode versions.

Usage:
  macrackctl image push --disk F --aux F --hardware-model F --macos V --xcode V REPO[:TAG]
  macrackctl image inspect REF

Commands:
  push     cut a VM's disk into chunks, compress and push them with the rest;
           print the pinned reference (REPO@sha256:...) that a MacOSImage names
  inspect  print what a golden holds: versions, sizes, and every chunk
`

const imagePushUsage = `Push a golden image and print its pinned reference.

Usage:
  macrackctl image push --disk F --aux F --hardware-model F --macos V --xcode V [flags] REPO[:TAG]

The disk is cut into chunks, each compressed on its own and pushed as one
layer; blobs the registry already has are not uploaded again, so a push
that failed resumes. A progress bar goes to stderr; stdout gets one line,
REPO@sha256:<digest>, the reference to pin. Without a TAG the manifest is
pushed untagged.

Flags:
  --disk FILE               the VM's raw disk image (sparse is fine) (required)
  --aux FILE                its auxiliary storage (required)
  --hardware-model FILE     its hardware model (required)
  --macos VERSION           the guest's macOS, like 15.5 (required)
  --xcode VERSION           an installed Xcode, like 16.4; repeat it, or
                            separate versions with commas (at least one)
  --minimum-disk SIZE       the smallest instance disk it fits on, like 100Gi
                            (default: the disk's size)
  --chunk-size SIZE         uncompressed chunk size (default 512Mi, at most 4Gi)
  --compression ALGO        zstd or lz4 (default zstd)
  --concurrency N           chunks compressed and uploaded at once (default 4)
  --plain-http              talk http, not https (a loopback registry)
  --docker-config FILE      credentials: a Docker config JSON
                            ({"auths":{"host":{"auth":"..."}}}, as in a
                            kubernetes.io/dockerconfigjson Secret)

Exit codes: 0 pushed; 2 bad arguments, unreadable files or the registry refused.
`

const imageInspectUsage = `Print what a golden image holds.

Usage:
  macrackctl image inspect [flags] REF

REF is REPO@sha256:<digest> or REPO:TAG. The manifest and config are checked
as a node's agent checks them before pulling; no chunk is fetched.

Flags:
  --plain-http              talk http, not https (a loopback registry)
  --docker-config FILE      credentials: a Docker config JSON
  -o, --output FORMAT       table or json (default table)

Output:
  json  one object: apiVersion "macrackctl/v1", kind GoldenImage, reference
        (pinned), manifest {digest, size}, macOSVersion, xcodeVersions,
        minimumDiskBytes, diskBytes, chunkBytes, compression (zstd, lz4 or
        mixed), compressedBytes, chunks [{index, offset, size, digest,
        compression, layer {mediaType, digest, size}}], auxiliaryStorage and
        hardwareModel {mediaType, digest, size}. Fields are only ever added.

Exit codes: 0 printed; 2 bad arguments, the registry refused, or not a golden.
`

func runImage(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprint(e.stdout, imageUsage)
		if len(args) == 0 {
			return usagef("image", "no subcommand given")
		}
		return errHelp
	}
	switch args[0] {
	case "push":
		return runImagePush(ctx, e, args[1:])
	case "inspect":
		return runImageInspect(ctx, e, args[1:])
	}
	return usagef("image", "unknown subcommand %q", args[0])
}

// remoteFlags are the flags every image command takes to reach a registry.
type remoteFlags struct {
	plainHTTP    bool
	dockerConfig string
}

func (r *remoteFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&r.plainHTTP, "plain-http", false, "")
	fs.StringVar(&r.dockerConfig, "docker-config", "", "")
}

func (r *remoteFlags) options() (golden.RemoteOptions, error) {
	opts := golden.RemoteOptions{PlainHTTP: r.plainHTTP, UserAgent: "macrackctl"}
	if r.dockerConfig != "" {
		b, err := os.ReadFile(r.dockerConfig)
		if err != nil {
			return opts, fmt.Errorf("%w: the docker config: %w", errInput, err)
		}
		opts.DockerConfigJSON = b
	}
	return opts, nil
}

// sizeFlag is a byte count given as a Kubernetes quantity: 100Gi, 512Mi,
// or plain bytes.
type sizeFlag int64

func (s *sizeFlag) String() string { return fmt.Sprint(int64(*s)) }

func (s *sizeFlag) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("%q is not a size like 100Gi or 512Mi", v)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("%q is not a positive whole number of bytes", v)
	}
	*s = sizeFlag(n)
	return nil
}

func runImagePush(ctx context.Context, e env, args []string) error {
	const cmd = "image push"
	fs := newFlagSet(cmd)
	var src golden.Source
	var xcodes stringList
	var minimum, chunkSize sizeFlag
	var remote remoteFlags
	fs.StringVar(&src.Disk, "disk", "", "")
	fs.StringVar(&src.AuxiliaryStorage, "aux", "", "")
	fs.StringVar(&src.HardwareModel, "hardware-model", "", "")
	fs.StringVar(&src.MacOSVersion, "macos", "", "")
	fs.Var(&xcodes, "xcode", "")
	fs.Var(&minimum, "minimum-disk", "")
	fs.Var(&chunkSize, "chunk-size", "")
	compression := fs.String("compression", string(golden.Zstd), "")
	concurrency := fs.Int("concurrency", 4, "")
	remote.register(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, imagePushUsage)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "want exactly one REPO[:TAG], got %d arguments", len(pos))
	}
	for _, req := range []struct{ flag, v string }{
		{"--disk", src.Disk}, {"--aux", src.AuxiliaryStorage}, {"--hardware-model", src.HardwareModel}, {"--macos", src.MacOSVersion},
	} {
		if req.v == "" {
			return usagef(cmd, "%s is required", req.flag)
		}
	}
	for _, x := range xcodes {
		for _, v := range strings.Split(x, ",") {
			if v = strings.TrimSpace(v); v != "" {
				src.XcodeVersions = append(src.XcodeVersions, v)
			}
		}
	}
	if len(src.XcodeVersions) == 0 {
		return usagef(cmd, "--xcode is required (at least one version)")
	}
	comp := golden.Compression(*compression)
	if comp != golden.Zstd && comp != golden.LZ4 {
		return usagef(cmd, "--compression %q is neither zstd nor lz4", *compression)
	}
	if *concurrency < 1 {
		return usagef(cmd, "--concurrency %d must be at least 1", *concurrency)
	}
	src.MinimumDiskBytes = int64(minimum)
	ref, err := registry.ParseReference(pos[0])
	if err != nil {
		return usagef(cmd, "%q is not REPO[:TAG]: %v", pos[0], err)
	}
	tag := ref.Reference
	if _, derr := ref.Digest(); tag != "" && derr == nil {
		return usagef(cmd, "%q names a digest; push to REPO or REPO:TAG", pos[0])
	}
	opts, err := remote.options()
	if err != nil {
		return err
	}
	repo, err := golden.Repository(pos[0], opts)
	if err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	bar := newPushBar(e.stderr, fmt.Sprintf("pushing %s", pos[0]))
	desc, err := golden.Push(ctx, repo, tag, src, golden.PushOptions{
		ChunkSize:   int64(chunkSize),
		Compression: comp,
		Concurrency: *concurrency,
		Progress:    bar.set,
	})
	bar.finish()
	if err != nil {
		return fmt.Errorf("%w: pushing %s: %w", errInput, pos[0], err)
	}
	fmt.Fprintf(e.stdout, "%s/%s@%s\n", ref.Registry, ref.Repository, desc.Digest)
	return nil
}

// pushBar is the progress bar on stderr, made at the first report, when
// the total is known.
type pushBar struct {
	w    io.Writer
	desc string
	bar  *progressbar.ProgressBar
}

func newPushBar(w io.Writer, desc string) *pushBar { return &pushBar{w: w, desc: desc} }

func (p *pushBar) set(done, total int64) {
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.desc),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
	}
	_ = p.bar.Set64(done)
}

func (p *pushBar) finish() {
	if p.bar != nil && !p.bar.IsFinished() {
		fmt.Fprintln(p.w)
	}
}

func runImageInspect(ctx context.Context, e env, args []string) error {
	const cmd = "image inspect"
	fs := newFlagSet(cmd)
	var remote remoteFlags
	remote.register(fs)
	output := outputFlag(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, imageInspectUsage)
	if err != nil {
		return err
	}
	if *output == formatJUnit {
		return usagef(cmd, "--output junit does not apply; use table or json")
	}
	if len(pos) != 1 {
		return usagef(cmd, "want exactly one REF, got %d arguments", len(pos))
	}
	ref, err := registry.ParseReference(pos[0])
	if err != nil {
		return usagef(cmd, "%q is not REPO@sha256:... or REPO:TAG: %v", pos[0], err)
	}
	if ref.Reference == "" {
		return usagef(cmd, "%q names no tag or digest", pos[0])
	}
	opts, err := remote.options()
	if err != nil {
		return err
	}
	repo, err := golden.Repository(pos[0], opts)
	if err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	g, err := golden.Resolve(ctx, repo, ref.Reference)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errInput, pos[0], err)
	}
	r := goldenReport(ref.Registry+"/"+ref.Repository+"@"+g.Manifest.Digest.String(), g)
	if *output == formatJSON {
		return writeJSON(e.stdout, r)
	}
	writeGoldenTable(e.stdout, r)
	return nil
}

// GoldenReport is image inspect's JSON.
type GoldenReport struct {
	APIVersion       string        `json:"apiVersion"`
	Kind             string        `json:"kind"`
	Reference        string        `json:"reference"`
	Manifest         BlobReport    `json:"manifest"`
	MacOSVersion     string        `json:"macOSVersion"`
	XcodeVersions    []string      `json:"xcodeVersions"`
	MinimumDiskBytes int64         `json:"minimumDiskBytes"`
	DiskBytes        int64         `json:"diskBytes"`
	ChunkBytes       int64         `json:"chunkBytes"`
	Compression      string        `json:"compression"`
	CompressedBytes  int64         `json:"compressedBytes"`
	Chunks           []ChunkReport `json:"chunks"`
	AuxiliaryStorage BlobReport    `json:"auxiliaryStorage"`
	HardwareModel    BlobReport    `json:"hardwareModel"`
}

// BlobReport is one blob: media type, digest and size.
type BlobReport struct {
	MediaType string `json:"mediaType,omitempty"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// ChunkReport is one disk chunk: where it goes, its uncompressed size and
// digest, and its compressed layer.
type ChunkReport struct {
	Index       int        `json:"index"`
	Offset      int64      `json:"offset"`
	Size        int64      `json:"size"`
	Digest      string     `json:"digest"`
	Compression string     `json:"compression"`
	Layer       BlobReport `json:"layer"`
}

func goldenReport(pinned string, g *golden.Golden) GoldenReport {
	r := GoldenReport{
		APIVersion:       "macrackctl/v1",
		Kind:             "GoldenImage",
		Reference:        pinned,
		Manifest:         BlobReport{MediaType: g.Manifest.MediaType, Digest: g.Manifest.Digest.String(), Size: g.Manifest.Size},
		MacOSVersion:     g.Config.MacOSVersion,
		XcodeVersions:    nonNil(g.Config.XcodeVersions),
		MinimumDiskBytes: g.Config.MinimumDiskBytes,
		DiskBytes:        g.Config.DiskBytes,
		ChunkBytes:       g.Config.ChunkBytes,
		Chunks:           []ChunkReport{},
		AuxiliaryStorage: BlobReport{MediaType: g.AuxiliaryStorage.MediaType, Digest: g.AuxiliaryStorage.Digest.String(), Size: g.AuxiliaryStorage.Size},
		HardwareModel:    BlobReport{MediaType: g.HardwareModel.MediaType, Digest: g.HardwareModel.Digest.String(), Size: g.HardwareModel.Size},
	}
	for _, c := range g.Chunks {
		switch r.Compression {
		case "":
			r.Compression = string(c.Compression)
		case string(c.Compression):
		default:
			r.Compression = "mixed"
		}
		r.CompressedBytes += c.Layer.Size
		r.Chunks = append(r.Chunks, ChunkReport{
			Index:       c.Index,
			Offset:      c.Offset,
			Size:        c.Size,
			Digest:      c.Digest.String(),
			Compression: string(c.Compression),
			Layer:       BlobReport{MediaType: c.Layer.MediaType, Digest: c.Layer.Digest.String(), Size: c.Layer.Size},
		})
	}
	return r
}

// humanBytes is n in binary units, one decimal: 1.5 GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func writeGoldenTable(w io.Writer, r GoldenReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ratio := 0.0
	if r.DiskBytes > 0 {
		ratio = 100 * float64(r.CompressedBytes) / float64(r.DiskBytes)
	}
	fmt.Fprintf(tw, "Golden:\t%s\n", r.Reference)
	fmt.Fprintf(tw, "macOS:\t%s\n", r.MacOSVersion)
	fmt.Fprintf(tw, "Xcode:\t%s\n", strings.Join(r.XcodeVersions, ", "))
	fmt.Fprintf(tw, "Minimum disk:\t%s (%d bytes)\n", humanBytes(r.MinimumDiskBytes), r.MinimumDiskBytes)
	fmt.Fprintf(tw, "Disk:\t%s (%d bytes) in %d chunks of %s, %s\n",
		humanBytes(r.DiskBytes), r.DiskBytes, len(r.Chunks), humanBytes(r.ChunkBytes), r.Compression)
	fmt.Fprintf(tw, "Compressed:\t%s (%d bytes, %.1f%% of the disk)\n", humanBytes(r.CompressedBytes), r.CompressedBytes, ratio)
	fmt.Fprintf(tw, "Auxiliary storage:\t%s (%d bytes)\t%s\n", humanBytes(r.AuxiliaryStorage.Size), r.AuxiliaryStorage.Size, r.AuxiliaryStorage.Digest)
	fmt.Fprintf(tw, "Hardware model:\t%s (%d bytes)\t%s\n", humanBytes(r.HardwareModel.Size), r.HardwareModel.Size, r.HardwareModel.Digest)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHUNK\tOFFSET\tSIZE\tCOMPRESSED\tCOMPRESSION\tDIGEST (UNCOMPRESSED)\tLAYER DIGEST")
	for _, c := range r.Chunks {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\n", c.Index, c.Offset, c.Size, c.Layer.Size, c.Compression, c.Digest, c.Layer.Digest)
	}
	tw.Flush()
}
