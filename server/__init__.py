"""The TL language server (pygls 2.x, stdio). Started by `tl lsp`.

Invariant: importing this package imports no torch and touches no CUDA; compiles and GPU runs happen in a
worker process (`server.worker`). Nothing here writes to stdout: stdout is the protocol.
"""
