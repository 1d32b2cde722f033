"""check → translate → write FILE.cu + FILE.launch.json → compile, for one TL file or many.

The `.cu` written beside a `.tl` may be edited by hand afterwards (`tl run FILE.cu`). A rebuild never
overwrites such an edit: the `.launch.json` records the sha256 of the `.cu` as generated
(`LaunchSpec.source_sha256`), and a `.cu` whose content no longer matches it (or that has no launch
description at all) is left alone unless `force=True`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from runner.abi import LaunchSpec
from runner.cache import atomic_write
from runner.compile import CompiledKernel, CompileError, CompileJob, compile_many
from runner.cuparse import CuParseError, launch_json_path, load_cuda_file
from tl_language.diagnostics import Diagnostic, Severity


class BuildError(Exception):
    """A build stopped. `stage`: read | check | sketch | translate | overwrite | compile | cuda."""

    def __init__(
        self,
        *,
        stage: str,
        path: Path,
        message: str,
        diagnostics: list[Diagnostic] | None = None,
        compile_error: CompileError | None = None,
        text: str = "",
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.path = path
        self.message = message
        self.diagnostics = diagnostics or []
        self.compile_error = compile_error
        self.text = text  # the TL text, for snippets


@dataclass
class Translated:
    """A TL file after check and translation (or a hand-edited `.cu` after its ABI check)."""

    path: Path  # the .tl (or .cu) the user named
    cu_path: Path
    source: str
    spec: LaunchSpec
    source_map: dict[int, int] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)
    translate_seconds: float = 0.0
    text: str = ""  # TL text ("" for a .cu)


@dataclass
class Built:
    translated: Translated
    compiled: CompiledKernel

    @property
    def spec(self) -> LaunchSpec:
        return self.translated.spec


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def translate_file(tl_path: Path) -> Translated:
    """Check and translate one TL file. Raises BuildError (stage check / translate / read)."""
    try:
        text = tl_path.read_text()
    except OSError as exc:
        raise BuildError(stage="read", path=tl_path, message=f"cannot read: {exc.strerror}") from None
    return translate_text(text, tl_path)


def translate_text(text: str, tl_path: Path) -> Translated:
    """Check and translate TL text that `tl_path` names (it need not exist: generated variants pass a bare
    `NAME.tl`, so `#line` directives, and with them the compile cache key, do not depend on a temp dir)."""
    from tl_language import analyze

    start = time.perf_counter()
    analysis = analyze(text)
    errors = [d for d in analysis.diagnostics if d.severity == Severity.ERROR]
    if errors:
        raise BuildError(
            stage="check",
            path=tl_path,
            message=f"{len(errors)} error(s) in {tl_path.name}",
            diagnostics=errors,
            text=text,
        )
    if analysis.model.is_sketch:
        holes = [d for d in analysis.diagnostics if d.code in ("TL450", "TL451")]
        raise BuildError(
            stage="sketch",
            path=tl_path,
            message=f"{tl_path.name} is a sketch ({len(holes)} hole(s)): not built; "
            f"fill it with `tl complete {tl_path} --write` (planner) or `tl complete --llm`",
            diagnostics=holes,
            text=text,
        )
    try:
        from translator import TranslateError, translate
    except ImportError as exc:  # the translator package is part of this project; say so plainly
        raise BuildError(
            stage="translate", path=tl_path, message=f"the translator is unavailable: {exc}"
        ) from None
    try:
        result = translate(analysis, tl_path=str(tl_path))
    except TranslateError as exc:
        raise BuildError(
            stage="translate",
            path=tl_path,
            message=f"cannot translate {tl_path.name}",
            diagnostics=list(exc.diagnostics),
            text=text,
        ) from None
    warnings = [d for d in analysis.diagnostics if d.severity == Severity.WARNING]
    return Translated(
        path=tl_path,
        cu_path=tl_path.with_suffix(".cu"),
        source=result.source,
        spec=result.launch,
        source_map=dict(result.source_map),
        warnings=warnings,
        translate_seconds=time.perf_counter() - start,
        text=text,
    )


def edited_by_hand(cu_path: Path) -> bool:
    """True when `cu_path` exists and is not byte-for-byte the `.cu` a previous build wrote."""
    if not cu_path.exists():
        return False
    try:
        spec = LaunchSpec.from_json(launch_json_path(cu_path).read_text())
        current = cu_path.read_text()
    except (OSError, ValueError, TypeError):
        return True  # a .cu without (valid) launch description: not ours to overwrite
    return spec.source_sha256 is None or spec.source_sha256 != sha256(current)


def write_outputs(t: Translated, *, force: bool = False) -> None:
    """Write FILE.cu and FILE.launch.json beside the TL file (atomically). Refuses to clobber hand edits."""
    if not force and edited_by_hand(t.cu_path):
        try:
            same = t.cu_path.read_text() == t.source
        except OSError:
            same = False
        if not same:
            raise BuildError(
                stage="overwrite",
                path=t.path,
                message=f"{t.cu_path.name} was edited by hand since `tl build` wrote it; not overwriting it "
                f"(run `tl run {t.cu_path}` to verify the edit, "
                f"or `tl build --force {t.path}` to regenerate)",
            )
    t.spec = dataclasses.replace(t.spec, source_sha256=sha256(t.source))
    atomic_write(t.cu_path, t.source.encode())
    atomic_write(launch_json_path(t.cu_path), (t.spec.to_json() + "\n").encode())


def read_cuda(cu_path: Path) -> Translated:
    """A hand-edited (or generated) `.cu` with its `.launch.json`, entry point checked against the ABI."""
    try:
        source, spec, _entry = load_cuda_file(cu_path)
    except CuParseError as exc:
        raise BuildError(stage="cuda", path=cu_path, message=str(exc)) from None
    return Translated(path=cu_path, cu_path=cu_path, source=source, spec=spec)


def prepare(path: Path, *, write: bool = True, force: bool = False) -> Translated:
    """A `.tl` is checked, translated and (with `write`) written out; a `.cu` is read and ABI-checked."""
    if path.suffix == ".cu":
        return read_cuda(path)
    t = translate_file(path)
    if write:
        write_outputs(t, force=force)
    return t


def compile_all(
    items: list[Translated], *, device_arch: str | None = None, max_workers: int | None = None
) -> list[Built | BuildError]:
    """Compile every translated kernel in parallel; failures come back as BuildError values, in order."""
    jobs = [
        CompileJob(
            source=t.source,
            arch=t.spec.arch,
            name=t.cu_path.name,
            device_arch=device_arch,
            source_map=t.source_map or None,
            tl_file=str(t.path) if t.text else None,
        )
        for t in items
    ]
    out: list[Built | BuildError] = []
    for t, result in zip(items, compile_many(jobs, max_workers=max_workers), strict=True):
        if isinstance(result, CompileError):
            out.append(
                BuildError(
                    stage="compile", path=t.path, message=result.message, compile_error=result, text=t.text
                )
            )
        else:
            out.append(Built(translated=t, compiled=result))
    return out


def build_one(
    path: Path, *, device_arch: str | None = None, force: bool = False, write: bool = True
) -> Built:
    """prepare + compile one file; raises BuildError."""
    t = prepare(path, write=write, force=force)
    (result,) = compile_all([t], device_arch=device_arch, max_workers=1)
    if isinstance(result, BuildError):
        raise result
    return result
