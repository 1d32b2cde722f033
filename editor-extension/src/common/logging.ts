// One log output channel for the extension and the language client, so the server's stderr and the
// extension's own messages land in the same place ("TL Language Server" in the Output panel).
import * as vscode from "vscode";

let channel: vscode.LogOutputChannel | undefined;

export function createLogChannel(name: string): vscode.LogOutputChannel {
  channel = vscode.window.createOutputChannel(name, { log: true });
  return channel;
}

export function traceInfo(message: string): void {
  channel?.info(message);
}

export function traceWarn(message: string): void {
  channel?.warn(message);
}

export function traceError(message: string, error?: unknown): void {
  channel?.error(error === undefined ? message : `${message}: ${describeError(error)}`);
}

export function showLog(): void {
  channel?.show(true);
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    return error.message;
  }
  return typeof error === "string" ? error : JSON.stringify(error);
}
