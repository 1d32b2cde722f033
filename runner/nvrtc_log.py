"""Parse an NVRTC log into records: (file, line, severity, message, the snippet lines that follow).

NVRTC writes `FILE(LINE): error: MESSAGE`, `FILE(LINE): warning #177-D: MESSAGE` or
`FILE(LINE): catastrophic error: MESSAGE`, followed by the source line and a caret. With `#line N "x.tl"`
directives in the source, FILE is the TL file and LINE its line, so errors map back to TL for free. Lines
such as `detected during instantiation of ...` belong to the record above them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_RECORD = re.compile(
    r"^(?P<file>[^\s(][^()]*?)\((?P<line>\d+)\): "
    r"(?P<severity>catastrophic error|fatal error|error|warning|remark)"
    r"(?: #(?P<number>[\w-]+))?: (?P<message>.*)$"
)


@dataclass(frozen=True)
class LogRecord:
    file: str
    line: int  # 1-based, as NVRTC prints it
    severity: str  # "error" | "warning" | "remark" (catastrophic and fatal count as error)
    message: str
    number: str | None = None  # NVRTC's diagnostic number, e.g. "177-D"
    context: tuple[str, ...] = field(default=())

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    @property
    def is_tl(self) -> bool:
        return self.file.endswith(".tl")

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"


def parse_log(log: str) -> list[LogRecord]:
    records: list[LogRecord] = []
    current: dict | None = None
    context: list[str] = []

    def flush() -> None:
        if current is not None:
            records.append(LogRecord(**current, context=tuple(context)))

    for raw in log.splitlines():
        m = _RECORD.match(raw.strip())
        if m:
            flush()
            sev = m.group("severity")
            current = {
                "file": m.group("file"),
                "line": int(m.group("line")),
                "severity": "error" if "error" in sev else sev,
                "message": m.group("message").strip(),
                "number": m.group("number"),
            }
            context = []
        elif current is not None and raw.strip() and not _is_summary(raw):
            context.append(raw.rstrip())
    flush()
    return records


def _is_summary(line: str) -> bool:
    s = line.strip()
    return (" detected in the compilation of " in s) or s.startswith("Compilation terminated")


def map_records(
    records: list[LogRecord], source_name: str, source_map: Mapping[int, int] | None, tl_file: str | None
) -> list[LogRecord]:
    """Rewrite records in the generated `.cu` to TL lines through `source_map` (cuda line → TL line).

    Records already in a `.tl` file (from `#line` directives) and records in headers stay as they are.
    """
    if not source_map or tl_file is None:
        return records
    out = []
    for r in records:
        if r.file.endswith(source_name) and r.line in source_map:
            out.append(
                LogRecord(
                    file=tl_file,
                    line=source_map[r.line],
                    severity=r.severity,
                    message=r.message,
                    number=r.number,
                    context=r.context,
                )
            )
        else:
            out.append(r)
    return out
