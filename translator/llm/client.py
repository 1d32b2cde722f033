"""One chat call against an OpenAI-compatible endpoint, with retries that honour Retry-After.

The `openai` client's own retries are off (max_retries=0) so this module decides, logs and counts every
attempt: 429 and 5xx answers, timeouts and dropped connections are retried with exponential backoff (or the
server's Retry-After, capped); anything else fails at once with an `LlmError` whose message names the
endpoint and the HTTP status, never the key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from translator.llm.settings import NOT_CONFIGURED, LlmSettings

log = logging.getLogger("translator.llm")


class LlmError(Exception):
    """The endpoint could not give an answer (after retries). `kind`: config | http | timeout | connection |
    cancelled | empty."""

    def __init__(self, message: str, *, kind: str, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = attempts


class Cancelled(LlmError):
    def __init__(self) -> None:
        super().__init__("cancelled", kind="cancelled")


@dataclass(slots=True)
class Reply:
    text: str
    finish_reason: str | None  # "length": the answer was cut off at max_tokens
    attempts: int  # HTTP requests it took, retries included


@dataclass(slots=True)
class CallLog:
    """What happened on the wire (for tests and the CLI's --verbose); holds no secrets."""

    attempts: list[str] = field(default_factory=list)


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    raw = headers.get("retry-after-ms")
    if raw:
        try:
            return float(raw) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return float(raw)
        except ValueError:
            return None  # an HTTP date: fall back to our own backoff
    return None


def _sleep(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise Cancelled()


class ChatClient:
    def __init__(
        self, settings: LlmSettings, *, sleep: Callable[[float, threading.Event | None], None] = _sleep
    ):
        if not settings.configured:
            raise LlmError(NOT_CONFIGURED, kind="config")
        import openai  # deferred: the planner-only paths never import it

        self.settings = settings
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            # Local servers (vLLM, Ollama, llama.cpp) accept any key; the client insists on one.
            api_key=settings.api_key.reveal() or "not-needed",
            timeout=settings.timeout_s,
            max_retries=0,
        )
        self._sleep = sleep
        self.log = CallLog()

    def chat(self, messages: list[dict[str, str]], *, cancel: threading.Event | None = None) -> Reply:
        s = self.settings
        o = self._openai
        delay = s.backoff_s
        for attempt in range(1, s.retries + 2):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            wait: float | None = None
            try:
                kwargs: dict[str, Any] = {
                    "model": s.model,
                    "messages": messages,
                    "temperature": s.temperature,
                }
                if s.max_tokens:
                    kwargs["max_tokens"] = s.max_tokens
                resp = self._client.chat.completions.create(**kwargs)
            except o.APITimeoutError:
                what, status, kind = f"timed out after {s.timeout_s:g} s", None, "timeout"
            except o.APIConnectionError as e:
                what, status, kind = (
                    f"connection failed ({type(e.__cause__ or e).__name__})",
                    None,
                    "connection",
                )
            except o.APIStatusError as e:
                status = e.status_code
                what, kind = f"HTTP {status}: {_short(e, s.api_key.reveal())}", "http"
                if status != 429 and status < 500:
                    self.log.attempts.append(f"attempt {attempt}: {what}")
                    raise LlmError(
                        f"LLM endpoint {s.base_url} answered {what}",
                        kind=kind,
                        status=status,
                        attempts=attempt,
                    ) from None
                wait = _retry_after(e.response.headers)
            else:
                choice = resp.choices[0] if resp.choices else None
                text = (choice.message.content or "") if choice and choice.message else ""
                self.log.attempts.append(f"attempt {attempt}: ok ({len(text)} chars)")
                return Reply(text, choice.finish_reason if choice else None, attempt)
            self.log.attempts.append(f"attempt {attempt}: {what}")
            if attempt > s.retries:
                raise LlmError(
                    f"LLM endpoint {s.base_url} {what} (gave up after {attempt} attempt(s))",
                    kind=kind,
                    status=status,
                    attempts=attempt,
                ) from None
            pause = min(wait if wait is not None else delay, s.max_backoff_s)
            log.info(
                "LLM request %s; retrying in %.2f s (attempt %d of %d)", what, pause, attempt, s.retries + 1
            )
            self._sleep(pause, cancel)
            delay *= 2
        raise AssertionError("unreachable")  # the loop returns or raises


def _short(e: Exception, key: str) -> str:
    """The server's error message: one line, bounded, with our key blanked should the server echo it."""
    body = getattr(e, "body", None)
    msg = None
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else str(err)
    text = str(msg or getattr(e, "message", "") or type(e).__name__)
    text = " ".join(text.split())
    if key:
        text = text.replace(key, "***")
    return text[:200]
