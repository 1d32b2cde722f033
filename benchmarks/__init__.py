"""Benchmarks and device experiments; not part of the installed package.

Most scripts here run by path (`python3 benchmarks/attention.py`). This file makes the folder a regular
package so that `python3 -m benchmarks.sm90_device_check` (from the repository root) and the tests import
`benchmarks.sm90_variants` from this checkout even when some installed distribution ships a top-level
`benchmarks` package of its own.
"""
