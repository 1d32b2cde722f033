"""The translator: a checked TL document → kernel plan → one CUDA C++ (CuTe) source, its source map and
its launch description. Never touches a GPU.

    from tl_language import analyze
    from translator import translate
    t = translate(analyze(text), tl_path="examples/mha_fwd.tl")
    t.source, t.launch, t.source_map, t.plan
"""

from translator.errors import TranslateError
from translator.plan import KernelPlan, make_plan
from translator.translate import Translation, translate

__all__ = ["KernelPlan", "TranslateError", "Translation", "make_plan", "translate"]
