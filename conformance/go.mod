module github.com/skulkrt/skulk/conformance

go 1.26.0

require (
	github.com/vmihailenco/msgpack/v5 v5.4.1
	go.uber.org/goleak v1.3.0
)

require github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
