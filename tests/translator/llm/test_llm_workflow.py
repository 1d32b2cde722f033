"""The whole LLM workflow against the loopback server replaying recorded answers (conftest.py)."""

from __future__ import annotations

import json
import time

import pytest
from fake_openai import RECORDINGS, FakeOpenAI

from tl_language import analyze
from tl_language.diagnostics import make
from translator.llm.client import LlmError
from translator.llm.extract import extract_tl
from translator.llm.settings import LlmSettings, Secret
from translator.llm.workflow import complete, generate

KEY = "sk-test-SECRET-0123456789"
REQUEST = "a causal multi-head attention forward kernel, fp16, head dim 128, for A100"


def settings(fake: FakeOpenAI, **kw: object) -> LlmSettings:
    base = LlmSettings(
        base_url=fake.base_url,
        model="test-model",
        api_key=Secret(KEY),
        timeout_s=5.0,
        retries=2,
        backoff_s=0.01,
    )
    return base.with_(**kw)


def recorded(name: str, i: int) -> str:
    """The TL inside the i-th recorded answer (what the workflow should end with)."""
    return extract_tl(json.loads((RECORDINGS / f"{name}.json").read_text())["responses"][i]["content"])


def codes(diags: list) -> list[tuple[str, int]]:
    return [(d.code, d.range.start.line + 1) for d in diags]


def test_missing_reshape_is_repaired_in_one_round(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("missing_reshape")
    r = generate(REQUEST, settings=settings(fake), rounds=3, stages=[])
    assert [(a.stage, a.round) for a in r.attempts] == [("sketch", 0), ("sketch", 1), ("code", 0)]
    assert codes([d for d in r.attempts[0].checked.diagnostics if d.code == "TL202"]) == [("TL202", 28)]
    assert r.rounds == 1
    assert r.ok and not r.offline
    assert r.sketch == recorded("missing_reshape", 1)
    assert r.code == recorded("missing_reshape", 2)
    assert r.diagnostics == []
    # The repair prompt carried the checker's diagnostic as `line N: CODE ...`; hole hints were not sent.
    repair = fake.requests[1].last_user
    assert "line 28: TL202 error:" in repair
    assert "TL450" not in repair
    # The repair continued the conversation: the first answer is in the history.
    assert fake.requests[1].body["messages"][-2]["role"] == "assistant"
    # Stage 1b received the repaired sketch and the planner's ranking.
    stage2 = fake.requests[2].last_user
    assert "Reshape S from (MMA_C, MMA_M, MMA_N)" in stage2 and "1. BM=" in stage2
    assert len(fake.requests) == 3


def test_answers_wrapped_in_prose(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("prose")
    r = generate(REQUEST, settings=settings(fake), stages=[])
    assert r.rounds == 0 and r.ok
    assert r.code == recorded("prose", 1)
    assert r.code.startswith("Kernel causal_mha_fwd\n") and r.code.endswith("as O\n")
    assert "Here is" not in r.code and "KiB" not in r.code
    assert len(fake.requests) == 2


def test_truncated_answer_is_repaired(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("truncated")
    r = generate(REQUEST, settings=settings(fake), stages=[])
    cut = r.attempts[1]
    assert cut.finish_reason == "length"
    assert cut.checked.problems == [
        "the answer was cut off (max tokens reached): send the whole file, shorter"
    ]
    assert ("TL004", 20) in codes(cut.checked.diagnostics)
    repair = fake.requests[2].last_user
    assert "cut off" in repair and "line 20: TL004 error:" in repair
    assert r.rounds == 1 and r.ok and r.diagnostics == []
    assert r.code == recorded("truncated", 2)


def test_429_then_success_honours_retry_after(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("rate_limited")
    t0 = time.monotonic()
    # A 10 s backoff would be used if Retry-After (0.05 s) were ignored.
    r = generate(REQUEST, settings=settings(fake, backoff_s=10.0), stages=[])
    elapsed = time.monotonic() - t0
    assert r.ok and r.rounds == 0
    assert len(fake.requests) == 3  # 429, sketch, code
    assert fake.requests[0].body == fake.requests[1].body  # the same request, retried
    assert elapsed < 5.0


def test_timeout_then_retry_succeeds(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("timeout_then_ok")
    r = generate(REQUEST, settings=settings(fake, timeout_s=0.4, retries=1), stages=[])
    assert r.ok and r.rounds == 0
    assert len(fake.requests) == 3  # timed out, retried, code


def test_timeout_without_retries_is_a_clear_error(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("timeout_only")
    with pytest.raises(LlmError) as err:
        generate(REQUEST, settings=settings(fake, timeout_s=0.4, retries=0), stages=[])
    assert err.value.kind == "timeout" and err.value.attempts == 1
    assert (
        str(err.value) == f"LLM endpoint {fake.base_url} timed out after 0.4 s (gave up after 1 attempt(s))"
    )
    assert len(fake.requests) == 1


def test_never_valid_returns_the_best_attempt(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("never_valid")
    r = generate(REQUEST, settings=settings(fake), rounds=2, stages=[])
    code_attempts = [a for a in r.attempts if a.stage == "code"]
    assert [a.checked.errors for a in code_attempts] == [1, 3, 2]
    assert code_attempts[0].checked.problems == ["the answer contains no TL code"]
    assert not r.ok and r.rounds == 2
    # An answer without TL ranks last whatever its count; of the rest the one with fewest errors wins.
    assert r.code == recorded("never_valid", 3)
    assert codes([d for d in r.diagnostics if d.severity == 1]) == [("TL106", 16), ("TL103", 17)]
    assert len(fake.requests) == 4
    assert "the answer contains no TL code" in fake.requests[2].last_user
    assert "line 1: TL002 error:" in fake.requests[3].last_user


def test_later_stage_errors_are_fed_back(fake_openai: FakeOpenAI) -> None:
    """Compile errors (any later stage) go back to the model like checker diagnostics."""
    fake = fake_openai.load("compile_feedback")

    def fake_compile(analysis):  # a stand-in for NVRTC that rejects BN = 32
        bn = analysis.model.params["BN"].value
        line = analysis.model.params["BN"].stmt.range
        return [make("TL502", line, "no instance of cute::copy matches (BN = 32)")] if bn == 32 else []

    r = generate(REQUEST, settings=settings(fake), stages=[("compile", fake_compile)])
    assert codes(r.attempts[1].checked.diagnostics) == [("TL502", 5)]
    assert "line 5: TL502 error: no instance of cute::copy matches (BN = 32)" in fake.requests[2].last_user
    assert r.ok and r.rounds == 1
    assert analyze(r.code).model.params["BN"].value == 64


def test_complete_with_the_model(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("complete")
    text = (
        recorded("complete", 0)
        .replace("Param BM = 128", "Param BM = ?")
        .replace("Param BN = 64", "Param BN = ?")
    )
    r = complete(text, settings(fake), stages=[])
    assert r.ok and r.rounds == 0 and not r.offline
    assert r.values == {"BM": 128, "BN": 64}
    assert "Param BM = ?" in fake.requests[0].last_user


def test_not_configured_generate_is_offline_and_says_so() -> None:
    r = generate("GQA causal bf16 head dim 128 for A100", settings=LlmSettings(), stages=[])
    assert r.offline and r.ok and r.rounds == 0 and r.attempts == []
    assert r.notes[0].startswith("offline generator:")
    assert "no LLM endpoint configured: set TL_LLM_BASE_URL" in r.notes[0]
    assert not [d for d in analyze(r.code).diagnostics if d.severity <= 2 or d.code in ("TL450", "TL451")]


def test_not_configured_complete_with_llm_raises_clearly() -> None:
    with pytest.raises(LlmError) as err:
        complete("Kernel k\n", LlmSettings(), use_llm=True)
    assert err.value.kind == "config"
    assert str(err.value).startswith("no LLM endpoint configured: set TL_LLM_BASE_URL")


def test_cancel_stops_before_the_next_request(fake_openai: FakeOpenAI) -> None:
    import threading

    from translator.llm.client import Cancelled

    fake = fake_openai.load("rate_limited")
    cancel = threading.Event()
    progress: list[str] = []

    def on_progress(message: str) -> None:
        progress.append(message)

    cancel.set()
    with pytest.raises(Cancelled):
        generate(REQUEST, settings=settings(fake), stages=[], cancel=cancel, on_progress=on_progress)
    assert fake.requests == []
    assert progress == ["sketch: asking test-model"]


def test_cancel_during_retry_after(fake_openai: FakeOpenAI) -> None:
    import threading

    from translator.llm.client import Cancelled

    fake = fake_openai
    fake.responses = [{"status": 429, "headers": {"Retry-After": "5"}, "error": "slow down"}]
    cancel = threading.Event()

    def cancel_after_first_request() -> None:
        while not fake.requests:
            time.sleep(0.005)
        cancel.set()

    threading.Thread(target=cancel_after_first_request, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        generate(REQUEST, settings=settings(fake, retries=2), stages=[], cancel=cancel)
    assert time.monotonic() - t0 < 3.0  # the 5 s Retry-After wait was interrupted
    assert len(fake.requests) == 1
