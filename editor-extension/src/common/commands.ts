// Palette commands mirroring the server's code-action commands. They have their own ids (tl.editor.*)
// because vscode-languageclient registers the server's advertised ids (tl.generateCuda, ...) itself;
// these wrappers add what the palette needs: the active document's URI as argument.
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient } from "vscode-languageclient/node";
import { EditorCommand, LANGUAGE_ID, SERVER_NAME, ServerCommand } from "./constants";
import { describeError, showLog, traceError } from "./logging";
import { ResultParams } from "./statusBar";

type ClientGetter = () => LanguageClient | undefined;
type ResultSink = (result: ResultParams) => void;

/** What the server's commands answer: `{status: "ok" | "failed" | "unavailable" | ..., message?}`. */
interface CommandOutcome {
  status?: string;
  message?: string;
}

interface Mirror {
  id: string;
  server: string;
  title: string;
  /** Long-running GPU/compile commands: a progress notification, and their outcome goes to the status bar. */
  progress: boolean;
  /** The server's job kind when it is not the command's name (the status bar shows it). */
  kind?: string;
}

const MIRRORS: Mirror[] = [
  { id: EditorCommand.generateCuda, server: ServerCommand.generateCuda, title: "Generating CUDA", progress: false },
  { id: EditorCommand.verify, server: ServerCommand.verify, title: "Verifying on the GPU", progress: true },
  { id: EditorCommand.benchmark, server: ServerCommand.benchmark, title: "Benchmarking", progress: true },
  {
    id: EditorCommand.verifyBackward,
    server: ServerCommand.verifyBackward,
    title: "Verifying the backward on the GPU",
    progress: true,
    kind: "verify-backward",
  },
  {
    id: EditorCommand.benchmarkBackward,
    server: ServerCommand.benchmarkBackward,
    title: "Benchmarking the backward",
    progress: true,
    kind: "benchmark-backward",
  },
  { id: EditorCommand.format, server: ServerCommand.format, title: "Formatting", progress: false },
];

export function registerCommands(
  getClient: ClientGetter,
  restartServer: () => Promise<void>,
  onResult: ResultSink,
): vscode.Disposable[] {
  const disposables = MIRRORS.map((mirror) =>
    vscode.commands.registerCommand(mirror.id, () => runOnActiveDocument(getClient, mirror, onResult)),
  );
  disposables.push(
    vscode.commands.registerCommand(EditorCommand.restartServer, restartServer),
    vscode.commands.registerCommand(EditorCommand.restartWorker, () =>
      execute(getClient, ServerCommand.restartWorker, []),
    ),
    vscode.commands.registerCommand(EditorCommand.showLog, showLog),
  );
  return disposables;
}

async function runOnActiveDocument(getClient: ClientGetter, mirror: Mirror, onResult: ResultSink): Promise<void> {
  const document = vscode.window.activeTextEditor?.document;
  if (document?.languageId !== LANGUAGE_ID) {
    await vscode.window.showWarningMessage(`${mirror.title}: open a .tl file first.`);
    return;
  }
  const uri = document.uri.toString();
  if (!mirror.progress) {
    await execute(getClient, mirror.server, [uri]);
    return;
  }
  const outcome = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `TL: ${mirror.title}…`, cancellable: true },
    (_progress, token) => execute(getClient, mirror.server, [uri], token),
  );
  if (outcome?.status !== undefined && outcome.message !== undefined) {
    const kind = mirror.kind ?? mirror.server.replace(/^tl\./, "");
    onResult({ uri, kind, ok: outcome.status === "ok", summary: outcome.message });
  }
}

async function execute(
  getClient: ClientGetter,
  command: string,
  args: unknown[],
  token?: vscode.CancellationToken,
): Promise<CommandOutcome | undefined> {
  const client = getClient();
  if (client === undefined) {
    await vscode.window.showErrorMessage(`${SERVER_NAME} is not running; run "TL: Restart Server".`);
    return undefined;
  }
  try {
    const result: unknown = await client.sendRequest(
      ExecuteCommandRequest.type,
      { command, arguments: args },
      token,
    );
    const outcome = asOutcome(result);
    // The server reports failures itself (window/showMessage, diagnostics); only successes are echoed here.
    if (outcome.status === "ok" && outcome.message !== undefined) {
      void vscode.window.showInformationMessage(`TL: ${outcome.message}`);
    }
    return outcome;
  } catch (error) {
    if (token?.isCancellationRequested) {
      return undefined;
    }
    traceError(`${command} failed`, error);
    await vscode.window.showErrorMessage(`${command} failed: ${describeError(error)}`);
    return undefined;
  }
}

function asOutcome(result: unknown): CommandOutcome {
  if (typeof result !== "object" || result === null) {
    return {};
  }
  const { status, message } = result as Record<string, unknown>;
  return {
    status: typeof status === "string" ? status : undefined,
    message: typeof message === "string" && message !== "" ? message : undefined,
  };
}
