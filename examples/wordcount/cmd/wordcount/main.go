// Command wordcount is the wordcount provider as a process a host starts.
package main

import (
	"os"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/examples/wordcount"
)

func main() { os.Exit(child.Run(wordcount.Options(nil))) }
