"""Wrap each feature so one exception is logged with the feature's name and answers empty (esbonio's idea):
a bug in hover must not break diagnostics or the session."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from pygls.exceptions import JsonRpcException

log = logging.getLogger("server.features")

F = TypeVar("F", bound=Callable[..., Any])


def safe(feature: str, empty: Any = None) -> Callable[[F], F]:
    def wrap(fn: F) -> F:
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(*args, **kwargs)
                except (asyncio.CancelledError, JsonRpcException):
                    raise  # cancellation, and errors meant for the client (e.g. an invalid rename)
                except Exception:
                    log.exception("feature %s failed; answering empty", feature)
                    return empty() if callable(empty) else empty

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except JsonRpcException:
                raise
            except Exception:
                log.exception("feature %s failed; answering empty", feature)
                return empty() if callable(empty) else empty

        return run  # type: ignore[return-value]

    return wrap
