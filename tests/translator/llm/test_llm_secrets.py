"""The API key reaches the endpoint's Authorization header and nowhere else: not logs, errors or reprs."""

from __future__ import annotations

import logging

import pytest
from fake_openai import FakeOpenAI

from translator.llm.client import LlmError
from translator.llm.settings import LlmSettings, Secret
from translator.llm.workflow import generate

KEY = "sk-test-SECRET-0123456789"


def test_key_only_in_the_authorization_header(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake = fake_openai.load("auth_error")
    s = LlmSettings(base_url=fake.base_url, model="m", api_key=Secret(KEY), retries=2, backoff_s=0.01)
    caplog.set_level(logging.DEBUG)  # every logger, openai's and httpx's included
    with pytest.raises(LlmError) as err:
        generate("causal MHA fp16 hd128", settings=s, stages=[])
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert err.value.kind == "http" and err.value.status == 401 and err.value.attempts == 1
    assert len(fake.requests) == 1  # 401 is not retried
    message = str(err.value)
    assert message.startswith(
        f"LLM endpoint {fake.base_url} answered HTTP 401: Incorrect API key provided: ***"
    )
    assert KEY not in message and KEY not in repr(err.value)
    assert caplog.records, "expected some log output at DEBUG"
    assert KEY not in caplog.text
    for rec in caplog.records:
        assert KEY not in rec.getMessage()


def test_settings_never_show_the_key() -> None:
    s = LlmSettings.from_env({"OPENAI_API_KEY": KEY, "TL_LLM_BASE_URL": "http://x/v1", "TL_LLM_MODEL": "m"})
    assert s.api_key.reveal() == KEY
    assert KEY not in repr(s) and KEY not in str(s) and KEY not in f"{s.api_key}"


def test_from_env_reads_every_setting() -> None:
    s = LlmSettings.from_env(
        {
            "TL_LLM_BASE_URL": "http://localhost:11434/v1",
            "TL_LLM_MODEL": "qwen2.5-coder",
            "TL_LLM_TEMPERATURE": "0.5",
            "TL_LLM_TIMEOUT": "30",
            "TL_LLM_RETRIES": "5",
            "TL_LLM_MAX_TOKENS": "4096",
        }
    )
    assert (s.base_url, s.model, s.temperature, s.timeout_s, s.retries, s.max_tokens) == (
        "http://localhost:11434/v1",
        "qwen2.5-coder",
        0.5,
        30.0,
        5,
        4096,
    )
    assert s.configured and not s.api_key


def test_not_configured_without_url_or_model() -> None:
    assert not LlmSettings.from_env({}).configured
    assert not LlmSettings.from_env({"OPENAI_API_KEY": KEY, "TL_LLM_MODEL": "m"}).configured
    assert LlmSettings().not_configured_message.startswith("no LLM endpoint configured: set TL_LLM_BASE_URL")


def test_malformed_number_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"TL_LLM_TIMEOUT='soon' is not a number"):
        LlmSettings.from_env({"TL_LLM_TIMEOUT": "soon"})
