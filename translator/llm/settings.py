"""LLM endpoint settings, from the environment (or built directly by the language server from its config).

The API key is held as a `SecretStr`-like value: its repr and str are redacted, and nothing in this package
logs it or writes it to disk. `tests/translator/llm/test_secrets.py` checks logs and error messages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

NOT_CONFIGURED = (
    "no LLM endpoint configured: set TL_LLM_BASE_URL (e.g. http://localhost:8000/v1 for vLLM, "
    "http://localhost:11434/v1 for Ollama) and TL_LLM_MODEL, plus OPENAI_API_KEY for a hosted endpoint"
)


class Secret:
    """A string that never shows itself in a repr, str, f-string or traceback."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _float(env: dict[str, str] | os._Environ[str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as e:
        raise ValueError(f"{name}={raw!r} is not a number") from e


def _int(env: dict[str, str] | os._Environ[str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r} is not a non-negative integer")
    return int(raw)


@dataclass(frozen=True)
class LlmSettings:
    base_url: str | None = None
    model: str | None = None
    api_key: Secret = field(default_factory=lambda: Secret(""))
    temperature: float = 0.2
    timeout_s: float = 120.0  # per request
    retries: int = 3  # extra attempts on 429, 5xx, timeouts and dropped connections
    backoff_s: float = 1.0  # first retry delay; doubles each retry unless the server sends Retry-After
    max_backoff_s: float = 30.0
    max_tokens: int | None = None

    @property
    def configured(self) -> bool:
        """An endpoint and a model are named (a local server needs no key)."""
        return bool(self.base_url) and bool(self.model)

    @property
    def not_configured_message(self) -> str:
        return NOT_CONFIGURED

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> LlmSettings:
        """OPENAI_API_KEY, TL_LLM_BASE_URL (or OPENAI_BASE_URL), TL_LLM_MODEL, TL_LLM_TEMPERATURE,
        TL_LLM_TIMEOUT (seconds), TL_LLM_RETRIES, TL_LLM_MAX_TOKENS.

        Raises ValueError on a malformed number."""
        e = os.environ if env is None else env
        base = e.get("TL_LLM_BASE_URL") or e.get("OPENAI_BASE_URL") or None
        max_tokens = _int(e, "TL_LLM_MAX_TOKENS", 0)
        return LlmSettings(
            base_url=base.strip() if base else None,
            model=(e.get("TL_LLM_MODEL") or "").strip() or None,
            api_key=Secret(e.get("OPENAI_API_KEY", "")),
            temperature=_float(e, "TL_LLM_TEMPERATURE", 0.2),
            timeout_s=_float(e, "TL_LLM_TIMEOUT", 120.0),
            retries=_int(e, "TL_LLM_RETRIES", 3),
            max_tokens=max_tokens or None,
        )

    def with_(self, **changes: object) -> LlmSettings:
        return replace(self, **changes)  # type: ignore[arg-type]
