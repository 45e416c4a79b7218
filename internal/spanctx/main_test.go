package spanctx_test

import (
	"testing"

	"github.com/skulkrt/skulk/skulktest"
)

func TestMain(m *testing.M) { skulktest.Main(m) } // goleak.VerifyTestMain included
