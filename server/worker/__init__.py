"""The worker process: translation, NVRTC compiles, GPU verification and benchmarks run here, never in the
server. `manager.py` (server side, asyncio) starts it, talks JSON lines over its stdin/stdout, enforces
timeouts, kills it on cancellation and restarts it after a crash; `__main__.py` (worker side) runs jobs."""
