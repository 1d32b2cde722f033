"""Variant statements the checker must refuse (so `tl check` clean means `tl build` succeeds) and the
legal neighbours it must accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tl_language import analyze

BASE = (Path(__file__).resolve().parents[2] / "examples" / "causal_mha_fwd.tl").read_text()
SOFTMAX = "    Compute Softmax S                           # running row max and sum; rescales acc_o\n"
SIGMOID = BASE.replace(SOFTMAX, "    Compute Sigmoid S and get new S\n")


def _in_loop(line: str) -> str:
    return BASE.replace(SOFTMAX, f"    {line}\n{SOFTMAX}")


def _output(line: str) -> str:
    return SIGMOID.replace("Compute Divide acc_o, rowsum and get new acc_o", line)


def errors(text: str) -> list[str]:
    return [d.code for d in analyze(text).diagnostics if d.severity.name == "ERROR"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (_in_loop("Compute Max S and get new S"), "TL108"),  # a row max is the Softmax's
        (_in_loop("Compute Add S, acc_o and get new S"), "TL124"),  # acc_o is no value of a score
        (_in_loop("Compute Add S, rowsum and get new S"), "TL123"),
        (_output("Compute Multiply acc_o, kv_idx and get new acc_o"), "TL123"),  # the output is per row
        (_output("Compute Multiply acc_o, S and get new acc_o"), "TL124"),
    ],
)
def test_refused(text: str, code: str) -> None:
    assert code in errors(text)


@pytest.mark.parametrize(
    "text",
    [
        _in_loop("Compute Max S, 0.0 and get new S"),
        _in_loop("Compute Add S, batch * 0.0 and get new S"),
        _output("Compute Multiply acc_o, 1.0 / (q_idx + 1) and get new acc_o"),
        SIGMOID.replace("Compute Divide acc_o, rowsum and get new acc_o\n", ""),
    ],
)
def test_accepted(text: str) -> None:
    from translator.plan import make_plan

    assert errors(text) == []
    make_plan(analyze(text).model, text)  # and the translator takes it
