package gpbench

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCodecRawBytes(t *testing.T) {
	in := &Msg{B: []byte("sixty-four bytes, more or less")}
	b, err := Codec{}.Marshal(in)
	require.Falsef(t, err != nil || !bytes.Equal(b, in.B), "Marshal(*Msg) = %q, %v; want the bytes themselves", b, err)
	var out Msg
	if err := (Codec{}).Unmarshal(b, &out); err != nil || !bytes.Equal(out.B, in.B) {
		require.FailNow(t, fmt.Sprintf("Unmarshal = %q, %v", out.B, err))
	}
}

func TestCodecFallsBackToProtobuf(t *testing.T) {
	in := &grpc_health_v1.HealthCheckRequest{Service: "plugin"}
	b, err := Codec{}.Marshal(in)
	require.NoError(t, err)
	var out grpc_health_v1.HealthCheckRequest
	if err := (Codec{}).Unmarshal(b, &out); err != nil || !proto.Equal(in, &out) {
		require.FailNow(t, fmt.Sprintf("protobuf round trip = %v, %v", &out, err))
	}
	if _, err := (Codec{}).Marshal(42); err == nil {
		assert.Fail(t, "Marshal of an int did not fail")
	}
}

func TestStreamRequest(t *testing.T) {
	r := StreamRequest{Mode: ModeStream, N: 1 << 40, Size: 64}
	got, err := parseStreamRequest(r.bytes())
	require.Falsef(t, err != nil || got != r, "round trip = %+v, %v", got, err)
	if _, err := parseStreamRequest(make([]byte, 12)); !errors.Is(err, errRequest) {
		assert.Fail(t, fmt.Sprintf("short request: %v", err))
	}
	if _, err := parseStreamRequest(StreamRequest{Mode: ModeStream, N: 1, Size: MaxMsgSize}.bytes()); err != nil {
		assert.Fail(t, fmt.Sprintf("a message of MaxMsgSize: %v", err))
	}
	big := StreamRequest{Mode: ModeStream, N: 1, Size: MaxMsgSize + 1}
	if _, err := parseStreamRequest(big.bytes()); !errors.Is(err, errRequest) {
		assert.Fail(t, fmt.Sprintf("oversized message request: %v", err))
	}
}
