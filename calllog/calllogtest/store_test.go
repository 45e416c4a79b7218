package calllogtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/internal/eventstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryStore(t *testing.T) { // the module's in-memory store of its tests
	calllogtest.TestStore(t, func(t *testing.T) calllog.EventStore { return &eventstore.Memory{} })
}
