// Status bar item for TL files: the file's target and the last result the server reported.
// The target comes from the `Target` line (the one piece of TL the extension reads; no other language logic)
// or the `tl.target` default; results arrive through the server's `tl/result` notification.
import * as vscode from "vscode";
import { EditorCommand, LANGUAGE_ID } from "./constants";
import { defaultTarget } from "./settings";

/** Payload of the `tl/result` notification. */
export interface ResultParams {
  uri: string;
  /** "check" | "compile" | "verify" | "benchmark" | ... */
  kind?: string;
  ok: boolean;
  /** One line, e.g. "✓ rel-L2 2.1e-3 · 583 TFLOPS · 0.97× cuDNN". */
  summary: string;
}

const TARGET_LINE = /^[ \t]*target[ \t]+([A-Za-z0-9_]+)/im;

export class TlStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly results = new Map<string, ResultParams>();

  constructor() {
    this.item = vscode.window.createStatusBarItem("tl.status", vscode.StatusBarAlignment.Left, 50);
    this.item.name = "TL";
    this.item.command = EditorCommand.showLog;
  }

  setResult(result: ResultParams): void {
    this.results.set(normalizeUri(result.uri), result);
    this.refresh();
  }

  refresh(editor: vscode.TextEditor | undefined = vscode.window.activeTextEditor): void {
    const document = editor?.document;
    if (document?.languageId !== LANGUAGE_ID) {
      this.item.hide();
      return;
    }
    const match = TARGET_LINE.exec(document.getText());
    const target = match?.[1] ?? `${defaultTarget(document.uri)} (default)`;
    const result = this.results.get(normalizeUri(document.uri.toString()));
    this.item.text = result === undefined ? `$(chip) TL ${target}` : `$(chip) TL ${target} · ${result.summary}`;
    this.item.tooltip = result === undefined
      ? `Target ${target}. No compile, verify or benchmark result yet.`
      : `Target ${target}. Last ${result.kind ?? "result"}: ${result.summary}`;
    this.item.backgroundColor = result !== undefined && !result.ok
      ? new vscode.ThemeColor("statusBarItem.errorBackground")
      : undefined;
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }
}

/** URIs from the server and from VS Code may differ in percent-encoding; compare them parsed. */
function normalizeUri(uri: string): string {
  return vscode.Uri.parse(uri).toString();
}
