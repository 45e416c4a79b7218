package sequence_test

import (
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/sequence"
)

func ExampleFence() {
	// The provider direction of call-1, as a host reads it from a child.
	fence := sequence.New("call-1", frame.ProviderToCaller, 1)
	frames := []frame.Frame{
		{CallID: "call-1", Direction: frame.ProviderToCaller, Sequence: 1, Kind: frame.KindChunk},
		{CallID: "call-1", Direction: frame.ProviderToCaller, Sequence: 1, Kind: frame.KindChunk}, // replayed
		{CallID: "call-1", Direction: frame.ProviderToCaller, Sequence: 3, Kind: frame.KindChunk}, // gap
		{CallID: "call-1", Direction: frame.ProviderToCaller, Sequence: 2, Kind: frame.KindCompleted},
		{CallID: "call-1", Direction: frame.ProviderToCaller, Sequence: 3, Kind: frame.KindFailed}, // second terminal
	}
	for _, f := range frames {
		err := fence.Accept(&f)
		switch {
		case err == nil:
			fmt.Println(f.Sequence, f.Kind, "accepted")
		case errors.Is(err, sequence.ErrDuplicate):
			fmt.Println(f.Sequence, f.Kind, "refused: duplicate")
		case errors.Is(err, sequence.ErrGap):
			fmt.Println(f.Sequence, f.Kind, "refused: gap")
		case errors.Is(err, sequence.ErrDuplicateTerminal):
			fmt.Println(f.Sequence, f.Kind, "refused: duplicate terminal")
		}
	}
	fmt.Println("closed:", fence.Closed())
	// Output:
	// 1 chunk accepted
	// 1 chunk refused: duplicate
	// 3 chunk refused: gap
	// 2 completed accepted
	// 3 failed refused: duplicate terminal
	// closed: true
}
