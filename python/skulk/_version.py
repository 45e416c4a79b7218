"""The SDK's version, one place for the package, its build and its
runtime's hello."""

#: The SDK's version. Its major number is the version of the Skulk protocol
#: it speaks (docs/protocol.md: hello offers it, startup chooses it).
__version__ = "1.0.0"
