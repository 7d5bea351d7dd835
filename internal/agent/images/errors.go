package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"syscall"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Stage says which bytes of a blob failed their check.
type Stage string

const (
	// StageCompressed is the blob as fetched, checked against its layer
	// descriptor (size and digest). Auxiliary storage and the hardware
	// model are stored uncompressed, so this is their only stage.
	StageCompressed Stage = "compressed"
	// StageUncompressed is a chunk once decompressed, checked against its
	// annotations (Chunk.Size, Chunk.Digest).
	StageUncompressed Stage = "uncompressed"
	// StageWritten is a chunk read back from disk.img after it was
	// written over a region that held bytes before (a resumed or retried
	// chunk). It failing means the local disk, not the golden, is wrong.
	StageWritten Stage = "written"
)

// Blob names the part of a golden an error is about.
const (
	BlobChunk         = "chunk"
	BlobAux           = "aux"
	BlobHardwareModel = "hardware-model"
)

// ErrIntegrity is matched (errors.Is) by every integrity failure: a
// *DigestMismatchError or a *CorruptChunkError. A pull that fails with it
// has discarded the image's partial bytes and is not retried.
var ErrIntegrity = errors.New("golden integrity check failed")

// ErrDiskFull is matched by a pull that ran out of space on the cache's
// filesystem (ENOSPC or EDQUOT on write or truncate), or that the Space
// pre-check refused. The image's partial bytes have been removed.
var ErrDiskFull = errors.New("cache disk full")

// ErrBusy is returned by Pull when another golden (a different manifest)
// is being pulled under the same name.
var ErrBusy = errors.New("another golden is being pulled under this name")

// DigestMismatchError is a blob whose bytes are not what the golden
// claims: wrong digest, or wrong size (too short, or more bytes than
// claimed, which is caught before a byte past the claimed end is
// written).
type DigestMismatchError struct {
	// Blob is BlobChunk, BlobAux or BlobHardwareModel.
	Blob string
	// Chunk is the chunk's index, or -1 when Blob is not a chunk.
	Chunk int
	Stage Stage
	// Want and Got are the digests; Got is empty when the size was
	// already wrong and the stream was not hashed to its end.
	Want, Got digest.Digest
	// WantSize and GotSize are byte counts; GotSize is WantSize+1 when the
	// stream went on past the claimed size (it is not read further).
	WantSize, GotSize int64
}

func (e *DigestMismatchError) Error() string {
	what := e.Blob
	if e.Blob == BlobChunk {
		what = fmt.Sprintf("chunk %d", e.Chunk)
	}
	switch {
	case e.GotSize > e.WantSize:
		return fmt.Sprintf("%s: %s size: more than the %d bytes claimed", what, e.Stage, e.WantSize)
	case e.GotSize != e.WantSize:
		return fmt.Sprintf("%s: %s size: got %d bytes, want %d", what, e.Stage, e.GotSize, e.WantSize)
	default:
		return fmt.Sprintf("%s: %s digest mismatch: got %s, want %s", what, e.Stage, e.Got, e.Want)
	}
}

// Is makes errors.Is(err, ErrIntegrity) true.
func (e *DigestMismatchError) Is(target error) bool { return target == ErrIntegrity }

// CorruptChunkError is a chunk whose compressed bytes match its layer
// descriptor but do not decompress: the golden itself is bad.
type CorruptChunkError struct {
	Chunk int
	Err   error
}

func (e *CorruptChunkError) Error() string {
	return fmt.Sprintf("chunk %d: does not decompress: %v", e.Chunk, e.Err)
}

func (e *CorruptChunkError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrIntegrity) true.
func (e *CorruptChunkError) Is(target error) bool { return target == ErrIntegrity }

// NoRoomError is MakeRoom finding that need bytes cannot fit within the
// budget without evicting a pinned (or in-use) golden. Nothing was
// evicted.
type NoRoomError struct {
	Need, Budget, Used int64
	// Pinned are the pinned or in-use goldens holding space.
	Pinned []string
}

func (e *NoRoomError) Error() string {
	p := "none"
	if len(e.Pinned) > 0 {
		s := append([]string(nil), e.Pinned...)
		sort.Strings(s)
		p = strings.Join(s, ", ")
	}
	return fmt.Sprintf("no room in the golden cache: need %d bytes within a budget of %d, %d used; pinned: %s",
		e.Need, e.Budget, e.Used, p)
}

// fetchError is an error that came from the registry (Fetch or reading
// its stream), as opposed to our own checks or disk; only these are ever
// retried, and only when transient.
type fetchError struct{ err error }

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// retryable reports whether err is a transient registry error worth a
// retry with backoff.
func retryable(err error) bool {
	var fe *fetchError
	if !errors.As(err, &fe) {
		return false
	}
	return isTransient(fe.err)
}

// isTransient classifies a registry error: connection refused or reset,
// broken pipe, timeouts, an unexpected EOF (a body cut short), and HTTP
// 5xx, 408 and 429.
func isTransient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ENETDOWN),
		errors.Is(err, context.DeadlineExceeded): // a client timeout; the pull's own context is checked first
		return true
	}
	var er *errcode.ErrorResponse
	if errors.As(err, &er) {
		return er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests ||
			er.StatusCode == http.StatusRequestTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return false
}

// isNoSpace reports a full filesystem or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFull wraps a no-space error so that it matches both ErrDiskFull and
// the errno.
func diskFull(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrDiskFull, what, err)
}
