// Command wordcount is the wordcount provider as a process a host starts.
package main

import (
	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/examples/wordcount"
)

func main() { child.Main(wordcount.Options(nil)) }
