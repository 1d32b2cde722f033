"""TL: the language core (parser, checker, GPU model, hover, formatter).

Invariant: nothing in this package imports pygls, CUDA bindings or torch.
"""

from tl_language.analysis import Analysis, analyze
from tl_language.diagnostics import Diagnostic, Fix, Severity, TextEdit
from tl_language.parser import parse
from tl_language.source import Position, Range

__all__ = [
    "Analysis",
    "Diagnostic",
    "Fix",
    "Position",
    "Range",
    "Severity",
    "TextEdit",
    "analyze",
    "parse",
]
