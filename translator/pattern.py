"""The attention pattern lives in the language core (`tl_language.pattern`), so the checker and the
translator decide with one piece of code which programs have a kernel; the translator raises its own
error type from the pattern's diagnostics."""

from __future__ import annotations

from tl_language.model import Model
from tl_language.pattern import REQUIRED, STEP_KINDS, Match, PatternError
from tl_language.pattern import match_attention as _match
from translator.errors import TranslateError

__all__ = ["REQUIRED", "STEP_KINDS", "Match", "match_attention"]


def match_attention(model: Model) -> Match:
    try:
        return _match(model)
    except PatternError as err:
        raise TranslateError(err.diagnostics) from None
