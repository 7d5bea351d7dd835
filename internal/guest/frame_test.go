package guest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// frameSentinels are the errors ReadFrame's own failures wrap.
var frameSentinels = []error{ErrBadMagic, ErrUnsupportedVersion, ErrUnknownType, ErrFrameTooLarge, ErrTruncated, ErrMalformed}

// rawFrame builds a frame's bytes by hand, so tests can break any field.
func rawFrame(magicAndVersion string, t byte, length uint32, payload string) []byte {
	b := []byte(magicAndVersion)
	b = append(b, t)
	b = binary.BigEndian.AppendUint32(b, length)
	return append(b, payload...)
}

func TestEveryMessageSurvivesAWriteAndARead(t *testing.T) {
	at := time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		msg  Message
	}{
		{"a Hello carries the host's protocol version", Hello{ProtocolVersion: "1.0"}},
		{"a HelloAck carries the guest's versions", HelloAck{ProtocolVersion: "1.2", AgentVersion: "v0.3.1"}},
		{"a ReportRequest is an empty object", ReportRequest{}},
		{"a Report carries every field", Report{BootStage: "ready", XcodeVersions: []string{"15.4", "16.2"}, DiskHeadroomBytes: 42 << 30, ReadyForWork: true, Time: at}},
		{"an Error carries its code and message", Error{Code: CodeMalformed, Message: "bad frame magic"}},
		{"a ShutdownRequest is an empty object", ShutdownRequest{}},
		{"a ShutdownAck is an empty object", ShutdownAck{}},
		{"a Configure carries its config as it is", Configure{Config: json.RawMessage(`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"glrt-x"}}`)}},
		{"a ConfigureAck is an empty object", ConfigureAck{}},
		{"a Session carries its user", SessionRequest{User: "admin"}},
		{"a SessionAck is an empty object", SessionAck{}},
		{"a Report carries whether the guest is configured, and its job", Report{BootStage: "ready", XcodeVersions: []string{"16.2"}, Time: at,
			Configured: true, Job: &JobReport{Phase: JobFailed, ID: 4242, StartedAt: &at, FinishedAt: &at, QueuedSeconds: ptrTo(int64(7)),
				FailureReason: "script_failure", ExitCode: ptrTo(int32(2))}}},
		{"a Report of a job that waits carries only its phase", Report{BootStage: "ready", XcodeVersions: []string{}, Time: at, Configured: true, Job: &JobReport{Phase: JobWaiting}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteMessage(&buf, tc.msg); err != nil {
				t.Fatalf("WriteMessage: %v", err)
			}
			if got := buf.Bytes()[:4]; string(got) != "MRG\x01" {
				t.Fatalf("frame starts %q, want magic and version %q", got, "MRG\x01")
			}
			got, err := ReadMessage(&buf)
			if err != nil {
				t.Fatalf("ReadMessage: %v", err)
			}
			if !reflect.DeepEqual(got, tc.msg) {
				t.Fatalf("read %#v, wrote %#v", got, tc.msg)
			}
			if buf.Len() != 0 {
				t.Fatalf("%d bytes left after one frame", buf.Len())
			}
		})
	}
}

func TestReadFrameRefusesEachKindOfBadFrame(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    []byte
		want  error
		words string
	}{
		{"a frame with the wrong magic is refused", rawFrame("XRG\x01", 1, 2, "{}"), ErrBadMagic, "magic"},
		{"an HTTP request is refused as bad magic", []byte("GET / HTTP/1.1\r\n\r\n"), ErrBadMagic, "magic"},
		{"a frame format version 2 is refused", rawFrame("MRG\x02", 1, 2, "{}"), ErrUnsupportedVersion, "frame format version 2"},
		{"message type 0 is refused", rawFrame("MRG\x01", 0, 2, "{}"), ErrUnknownType, "0"},
		{"message type 12, after SessionAck, is refused", rawFrame("MRG\x01", 12, 2, "{}"), ErrUnknownType, "12"},
		{"a length over the limit is refused", rawFrame("MRG\x01", 4, MaxPayloadSize+1, ""), ErrFrameTooLarge, "65537"},
		{"the largest length is refused", rawFrame("MRG\x01", 4, 0xFFFFFFFF, ""), ErrFrameTooLarge, "4294967295"},
		{"an empty payload is refused", rawFrame("MRG\x01", 3, 0, ""), ErrMalformed, "empty"},
		{"a header cut short is truncated", []byte("MRG\x01\x03\x00"), ErrTruncated, "6 of 9"},
		{"a payload cut short is truncated", rawFrame("MRG\x01", 4, 100, `{"bootStage":`), ErrTruncated, "13 of 100"},
		{"a payload that is not JSON is malformed", rawFrame("MRG\x01", 1, 5, "hello"), ErrMalformed, "invalid JSON"},
		{"a JSON array payload is malformed", rawFrame("MRG\x01", 1, 2, "[]"), ErrMalformed, "not a JSON object"},
		{"a JSON null payload is malformed", rawFrame("MRG\x01", 1, 4, "null"), ErrMalformed, "not a JSON object"},
		{"two JSON objects in one payload are malformed", rawFrame("MRG\x01", 1, 4, "{}{}"), ErrMalformed, "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			for _, other := range frameSentinels {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("%v also wraps %v: the cause is ambiguous", err, other)
				}
			}
			if !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("error %q does not say %q", err, tc.words)
			}
		})
	}
}

func TestReadFrameReturnsEOFOnlyBeforeAFrame(t *testing.T) {
	if _, err := ReadFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty stream: got %v, want io.EOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte("M"))); errors.Is(err, io.EOF) || !errors.Is(err, ErrTruncated) {
		t.Fatalf("one byte: got %v, want ErrTruncated and not io.EOF", err)
	}
}

func TestDecodeRefusesAPayloadThatIsNotItsMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Frame
	}{
		{"a Hello whose version is a number", Frame{Type: TypeHello, Payload: []byte(`{"protocolVersion":1}`)}},
		{"a Report whose time is not a time", Frame{Type: TypeReport, Payload: []byte(`{"time":"yesterday"}`)}},
		{"a Report whose headroom is a string", Frame{Type: TypeReport, Payload: []byte(`{"diskHeadroomBytes":"lots"}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.f.Decode(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
	m, err := Frame{Type: TypeHelloAck, Payload: []byte(`{"protocolVersion":"1.9","agentVersion":"x","addedInMinor9":true}`)}.Decode()
	if err != nil || m != (HelloAck{ProtocolVersion: "1.9", AgentVersion: "x"}) {
		t.Fatalf("unknown fields must be ignored: got %#v, %v", m, err)
	}
}

func TestTheFramesOfProtocol12DecodeAndRefuseWhatIsNotTheirs(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Frame
		ok   bool
	}{
		{"a Configure whose config is an object decodes", Frame{Type: TypeConfigure, Payload: []byte(`{"config":{"version":1}}`)}, true},
		{"a Configure with no config decodes, for the guest to refuse", Frame{Type: TypeConfigure, Payload: []byte(`{}`)}, true},
		{"a ConfigureAck with fields of a later minor decodes", Frame{Type: TypeConfigureAck, Payload: []byte(`{"addedInMinor9":1}`)}, true},
		{"a 1.1 Report, with neither configured nor job, decodes", Frame{Type: TypeReport, Payload: []byte(`{"bootStage":"ready","time":"2026-06-02T13:00:00Z"}`)}, true},
		{"a Report whose configured is a string is malformed", Frame{Type: TypeReport, Payload: []byte(`{"configured":"yes"}`)}, false},
		{"a Report whose job is an array is malformed", Frame{Type: TypeReport, Payload: []byte(`{"job":[]}`)}, false},
		{"a Report whose job started at no time is malformed", Frame{Type: TypeReport, Payload: []byte(`{"job":{"phase":"Running","startedAt":"soon"}}`)}, false},
		{"a Report whose job's exit code is over 32 bits is malformed", Frame{Type: TypeReport, Payload: []byte(`{"job":{"phase":"Failed","exitCode":4294967296}}`)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.f.Decode()
			if tc.ok != (err == nil) {
				t.Fatalf("got %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
	for _, mt := range []MessageType{TypeConfigure, TypeConfigureAck, TypeSession, TypeSessionAck} {
		if !mt.known() || strings.HasPrefix(mt.String(), "MessageType(") {
			t.Errorf("type %d is not a known, named type: %s", byte(mt), mt)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// headerOnly serves one header and fails the test if read any further.
type headerOnly struct {
	t      *testing.T
	header []byte
}

func (r *headerOnly) Read(p []byte) (int, error) {
	if len(r.header) == 0 {
		r.t.Errorf("read %d bytes past the header", len(p))
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.header)
	r.header = r.header[n:]
	return n, nil
}

func TestAnOversizedLengthIsRefusedBeforeTheBodyIsReadOrAllocated(t *testing.T) {
	r := &headerOnly{t: t, header: rawFrame("MRG\x01", 4, 0xFFFFFFFF, "")}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(r)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes refusing a frame", grew)
	}
}

func TestWriteFrameRefusesWhatReadFrameWould(t *testing.T) {
	big := []byte(`{"message":"` + strings.Repeat("x", MaxPayloadSize) + `"}`)
	for _, tc := range []struct {
		name string
		f    Frame
		want error
	}{
		{"a payload over the limit", Frame{Type: TypeError, Payload: big}, ErrFrameTooLarge},
		{"an unknown type", Frame{Type: 12, Payload: []byte("{}")}, ErrUnknownType},
		{"an empty payload", Frame{Type: TypeReportRequest}, ErrMalformed},
		{"a payload that is not an object", Frame{Type: TypeHello, Payload: []byte(`"1.0"`)}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFrame(&buf, tc.f); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("wrote %d bytes of a refused frame", buf.Len())
			}
		})
	}
	if _, err := Encode(Error{Message: strings.Repeat("x", MaxPayloadSize)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Encode of an oversized message: got %v, want ErrFrameTooLarge", err)
	}
}

func TestParseVersionAcceptsOnlyMajorDotMinor(t *testing.T) {
	for _, tc := range []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"1.0", 1, 0, true},
		{"2.13", 2, 13, true},
		{"1", 0, 0, false},
		{"1.0.3", 0, 0, false},
		{"v1.0", 0, 0, false},
		{"1.-1", 0, 0, false},
		{"", 0, 0, false},
	} {
		t.Run("version "+tc.in, func(t *testing.T) {
			major, minor, err := ParseVersion(tc.in)
			if tc.ok != (err == nil) || major != tc.major || minor != tc.minor {
				t.Fatalf("got %d.%d, %v", major, minor, err)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

// FuzzReadFrame checks that no input makes ReadFrame panic, allocate past
// the limit, or fail without saying which rule the input broke.
func FuzzReadFrame(f *testing.F) {
	for _, m := range []Message{
		Hello{ProtocolVersion: ProtocolVersion},
		HelloAck{ProtocolVersion: ProtocolVersion, AgentVersion: "dev"},
		ReportRequest{},
		Report{BootStage: "ready", XcodeVersions: []string{"16.2"}, DiskHeadroomBytes: 1 << 35, ReadyForWork: true, Time: time.Unix(1780000000, 0).UTC()},
		Error{Code: CodeReportFailed, Message: "statfs /: permission denied"},
		ShutdownRequest{},
		ShutdownAck{},
		Configure{Config: json.RawMessage(`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"glrt-fuzz","tags":["macos"],"maxJobDuration":"1h"}}`)},
		ConfigureAck{},
		Error{Code: CodeConfigureFailed, Message: "this guest runs no workloads"},
		Report{BootStage: "ready", Time: time.Unix(1780000000, 0).UTC(), Configured: true,
			Job: &JobReport{Phase: JobRunning, ID: 99, QueuedSeconds: ptrTo(int64(3))}},
	} {
		var buf bytes.Buffer
		if err := WriteMessage(&buf, m); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte{})
	f.Add([]byte("MRG"))
	f.Add(rawFrame("XRG\x01", 1, 2, "{}"))
	f.Add(rawFrame("MRG\x07", 1, 2, "{}"))
	f.Add(rawFrame("MRG\x01", 0xff, 2, "{}"))
	f.Add(rawFrame("MRG\x01", 4, 0xFFFFFFFF, ""))
	f.Add(rawFrame("MRG\x01", 4, 50, `{"bootStage":`))
	f.Add(rawFrame("MRG\x01", 4, 8, `{"time":`))
	f.Add(rawFrame("MRG\x01", 4, 15, `{"time":"now"}`))
	f.Add(rawFrame("MRG\x01", 1, 2, "[]"))
	f.Add(rawFrame("MRG\x01", 8, 13, `{"config":[]}`))
	f.Add(rawFrame("MRG\x01", 8, 12, `{"config":1`))
	f.Add(rawFrame("MRG\x01", 4, 23, `{"job":{"phase":"Gone"}}`))
	f.Add(rawFrame("MRG\x01", 12, 2, "{}"))

	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := ReadFrame(bytes.NewReader(data))
		if err != nil {
			if err == io.EOF {
				if len(data) != 0 {
					t.Fatalf("io.EOF from %d bytes", len(data))
				}
				return
			}
			for _, s := range frameSentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error %v wraps no sentinel", err)
		}
		if !fr.Type.known() || len(fr.Payload) == 0 || len(fr.Payload) > MaxPayloadSize {
			t.Fatalf("accepted a frame that breaks the rules: type %d, %d bytes", fr.Type, len(fr.Payload))
		}
		// What was accepted must write back as the same bytes.
		var buf bytes.Buffer
		if err := WriteFrame(&buf, fr); err != nil {
			t.Fatalf("rewriting an accepted frame: %v", err)
		}
		if !bytes.Equal(buf.Bytes(), data[:buf.Len()]) {
			t.Fatalf("rewrote %q from %q", buf.Bytes(), data)
		}
		if _, err := fr.Decode(); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("decode error %v does not wrap ErrMalformed", err)
		}
	})
}
