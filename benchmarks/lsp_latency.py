"""Language-server latency over a real stdio connection (`python -m server`, what `tl lsp` runs).

Measures, on a 500-line TL file:
  - didChange → publishDiagnostics of that version (target < 50 ms; includes the server's debounce),
  - completion request → response, p95 (target < 30 ms),
and the server's resident memory after opening every example plus the 500-line file.

Run: `python benchmarks/lsp_latency.py [--lines 500] [--changes 60] [--completions 300] [--json OUT]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script, from a checkout that is not installed

from benchmarks.lsp_stdio import start_server, stop_server  # noqa: E402

DIAG_TARGET_MS = 50.0
COMPLETION_P95_TARGET_MS = 30.0


def make_document(lines: int) -> str:
    """The MHA example with its K/V loop repeated (each copy its own loop variable) up to `lines` lines."""
    example = (ROOT / "examples" / "mha_fwd.tl").read_text().splitlines()
    start = next(i for i, s in enumerate(example) if s.startswith("for "))
    end = next(i for i, s in enumerate(example) if s == "end")
    head, loop, tail = example[:start], example[start : end + 1], example[end + 1 :]
    body: list[str] = []
    k = 0
    while len(head) + len(body) + len(loop) + 1 + len(tail) <= lines:
        body += [s.replace("for j", f"for j{k}").replace("L = j]", f"L = j{k}]") for s in loop] + [""]
        k += 1
    out = head + body + tail
    out += ["# padding"] * (lines - len(out))
    return "\n".join(out) + "\n"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


class Bench:
    def __init__(self, debounce_ms: int | None = None) -> None:
        settings: dict[str, Any] = {"onSave": "off"}
        if debounce_ms is not None:
            settings["debounceMs"] = debounce_ms
        self.client = LanguageClient("tl-bench", "1")
        self.published: dict[tuple[str, int | None], float] = {}
        self.arrived = asyncio.Event()

        @self.client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_publish(params: lsp.PublishDiagnosticsParams) -> None:
            self.published[(params.uri, params.version)] = time.perf_counter()
            self.arrived.set()

        @self.client.feature(lsp.WORKSPACE_CONFIGURATION)
        def on_config(params: lsp.ConfigurationParams) -> list[Any]:
            return [settings for _ in params.items]

    async def wait_published(self, uri: str, version: int, timeout: float = 10.0) -> float:
        deadline = time.perf_counter() + timeout
        while (uri, version) not in self.published:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), max(0.001, deadline - time.perf_counter()))
        return self.published[(uri, version)]

    def open(self, uri: str, text: str) -> None:
        self.client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(uri=uri, language_id="tl", version=1, text=text)
            )
        )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load_at_start = os.getloadavg()[0]
    b = Bench(args.debounce_ms)
    server, drainer = await start_server(b.client)
    rss_start = rss_kib(server.pid)

    text = make_document(args.lines)
    uri = (ROOT / "bench_500.tl").as_uri()
    b.open(uri, text)
    await b.wait_published(uri, 1)
    for f in sorted((ROOT / "examples").glob("*.tl")):
        b.open(f.as_uri(), f.read_text())
        await b.wait_published(f.as_uri(), 1)

    # didChange → publishDiagnostics: alternate a parameter so every version differs (and stays valid).
    lines = text.splitlines()
    bn = next(i for i, s in enumerate(lines) if s.startswith("Param BN"))
    diag_ms: list[float] = []
    for v in range(2, args.changes + 2):
        lines[bn] = f"Param BN = {64 if v % 2 else 32}"
        new = "\n".join(lines) + "\n"
        t0 = time.perf_counter()
        b.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=v),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=new)],
            )
        )
        t1 = await b.wait_published(uri, v)
        diag_ms.append((t1 - t0) * 1000)

    # Completion at a spread of positions: line starts, after `Compute `, inside tiles, after `from `.
    positions = []
    for i, s in enumerate(lines):
        for col in {0, len(s) // 2, len(s)}:
            positions.append(lsp.Position(line=i, character=col))
    comp_ms: list[float] = []
    for k in range(args.completions):
        p = positions[(k * 7919) % len(positions)]
        t0 = time.perf_counter()
        await b.client.text_document_completion_async(
            lsp.CompletionParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=p)
        )
        comp_ms.append((time.perf_counter() - t0) * 1000)

    # Completion sent right after a change, before the debounced analysis ran: it pays for the analysis.
    fresh_ms: list[float] = []
    v = args.changes + 2
    for k in range(30):
        v += 1
        lines[bn] = f"Param BN = {64 if v % 2 else 32}"
        b.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=v),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text="\n".join(lines) + "\n")],
            )
        )
        p = positions[(k * 7919) % len(positions)]
        t0 = time.perf_counter()
        await b.client.text_document_completion_async(
            lsp.CompletionParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=p)
        )
        fresh_ms.append((time.perf_counter() - t0) * 1000)
        await b.wait_published(uri, v)

    rss_end = rss_kib(server.pid)
    await stop_server(b.client, drainer)
    return {
        "cpus": os.cpu_count(),
        "load": load_at_start,
        "lines": len(text.splitlines()),
        "diagnostics_ms": {
            "median": statistics.median(diag_ms),
            "p95": pct(diag_ms, 0.95),
            "max": max(diag_ms),
            "n": len(diag_ms),
            "target": DIAG_TARGET_MS,
        },
        "completion_ms": {
            "median": statistics.median(comp_ms),
            "p95": pct(comp_ms, 0.95),
            "max": max(comp_ms),
            "n": len(comp_ms),
            "target_p95": COMPLETION_P95_TARGET_MS,
        },
        "completion_after_change_ms": {
            "median": statistics.median(fresh_ms),
            "p95": pct(fresh_ms, 0.95),
            "max": max(fresh_ms),
            "n": len(fresh_ms),
        },
        "rss_mib": {
            "after_start": rss_start / 1024,
            "after_opening_all": rss_end / 1024,
            "documents": 1 + len(list((ROOT / "examples").glob("*.tl"))),
        },
    }


def row(label: str, x: dict[str, Any], target: str, ok: bool) -> str:
    return (
        f"| {label} | {x['median']:.1f} | {x['p95']:.1f} | {x['max']:.1f} | {x['n']} | {target} "
        f"| {'PASS' if ok else 'FAIL'} |"
    )


def table(r: dict[str, Any]) -> str:
    d, c, m = r["diagnostics_ms"], r["completion_ms"], r["rss_mib"]
    f = r["completion_after_change_ms"]
    rows = [
        f"TL language server over stdio, {r['lines']}-line document",
        "| measure | median | p95 | max | n | target | |",
        "|---|---|---|---|---|---|---|",
        row("didChange → publishDiagnostics (ms)", d, f"< {d['target']:.0f}", d["p95"] < d["target"]),
        row("completion (ms)", c, f"p95 < {c['target_p95']:.0f}", c["p95"] < c["target_p95"]),
        row(
            "completion right after a change (ms)",
            f,
            f"p95 < {c['target_p95']:.0f}",
            f["p95"] < c["target_p95"],
        ),
        "",
        f"resident memory: {m['after_start']:.1f} MiB after start, {m['after_opening_all']:.1f} MiB after "
        f"opening {m['documents']} documents (all examples + the {r['lines']}-line file)",
        f"machine: {r['cpus']} CPUs, load average {r['load']:.2f} at the start",
    ]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--changes", type=int, default=60)
    ap.add_argument("--completions", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--debounce-ms", type=int, default=None, help="override the server's tl.debounceMs")
    args = ap.parse_args()
    result = asyncio.run(run(args))
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
