"""The package's version, at the bottom of the levels so that any of them (e.g. a server reporting what
it runs) can read it; the package root re-exports it as `edgemesh_tf.__version__`."""

VERSION = "0.1.0"
