package jetstreamstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/nats-io/nats.go/jetstream"
)

// wrongLast takes both of the server's refusals of an expected last
// sequence (10071; 10164 from a replicated stream), wrapped or not, and
// nothing else.
func TestWrongLast(t *testing.T) {
	for _, tc := range []struct {
		code jetstream.ErrorCode
		want bool
	}{
		{10071, true}, // JSStreamWrongLastSequenceErrF
		{10164, true}, // JSStreamWrongLastSequenceConstantErr
		{jetstream.JSErrCodeStreamNotFound, false},
		{jetstream.JSErrCodeMessageNotFound, false},
		{errTooLargeBatch, false},
		{0, false},
	} {
		err := &jetstream.APIError{Code: 400, ErrorCode: tc.code, Description: "x"}
		if got := wrongLast(err); got != tc.want {
			assert.Fail(t, fmt.Sprintf("wrongLast(code %d) = %v, want %v", tc.code, got, tc.want))
		}
		if got := wrongLast(fmt.Errorf("publish: %w", err)); got != tc.want {
			assert.Fail(t, fmt.Sprintf("wrongLast(wrapped code %d) = %v, want %v", tc.code, got, tc.want))
		}
	}
	for _, err := range []error{nil, errors.New("wrong last sequence"), jetstream.ErrMsgNotFound} {
		assert.Falsef(t, wrongLast(err), "wrongLast(%v) = true", err)
	}
}
