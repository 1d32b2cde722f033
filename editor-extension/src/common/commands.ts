// Palette commands mirroring the server's code-action commands. They have their own ids (tl.editor.*)
// because vscode-languageclient registers the server's advertised ids (tl.generateCuda, ...) itself;
// these wrappers add what the palette needs: the active document's URI as argument.
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient } from "vscode-languageclient/node";
import { EditorCommand, LANGUAGE_ID, SERVER_NAME, ServerCommand } from "./constants";
import { describeError, showLog, traceError } from "./logging";

type ClientGetter = () => LanguageClient | undefined;

interface Mirror {
  id: string;
  server: string;
  title: string;
  /** Long-running commands show a progress notification. */
  progress: boolean;
}

const MIRRORS: Mirror[] = [
  { id: EditorCommand.generateCuda, server: ServerCommand.generateCuda, title: "Generating CUDA", progress: false },
  { id: EditorCommand.verify, server: ServerCommand.verify, title: "Verifying on the GPU", progress: true },
  { id: EditorCommand.benchmark, server: ServerCommand.benchmark, title: "Benchmarking", progress: true },
  { id: EditorCommand.format, server: ServerCommand.format, title: "Formatting", progress: false },
];

export function registerCommands(
  getClient: ClientGetter,
  restartServer: () => Promise<void>,
): vscode.Disposable[] {
  const disposables = MIRRORS.map((mirror) =>
    vscode.commands.registerCommand(mirror.id, () => runOnActiveDocument(getClient, mirror)),
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

async function runOnActiveDocument(getClient: ClientGetter, mirror: Mirror): Promise<void> {
  const document = vscode.window.activeTextEditor?.document;
  if (document?.languageId !== LANGUAGE_ID) {
    await vscode.window.showWarningMessage(`${mirror.title}: open a .tl file first.`);
    return;
  }
  const args = [document.uri.toString()];
  if (!mirror.progress) {
    await execute(getClient, mirror.server, args);
    return;
  }
  await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `TL: ${mirror.title}…`, cancellable: true },
    (_progress, token) => execute(getClient, mirror.server, args, token),
  );
}

async function execute(
  getClient: ClientGetter,
  command: string,
  args: unknown[],
  token?: vscode.CancellationToken,
): Promise<void> {
  const client = getClient();
  if (client === undefined) {
    await vscode.window.showErrorMessage(`${SERVER_NAME} is not running; run "TL: Restart Server".`);
    return;
  }
  try {
    const result: unknown = await client.sendRequest(
      ExecuteCommandRequest.type,
      { command, arguments: args },
      token,
    );
    const message = resultMessage(result);
    if (message !== undefined) {
      await vscode.window.showInformationMessage(message);
    }
  } catch (error) {
    if (token?.isCancellationRequested) {
      return;
    }
    traceError(`${command} failed`, error);
    await vscode.window.showErrorMessage(`${command} failed: ${describeError(error)}`);
  }
}

/** Servers answer with nothing, a string, or an object with a `message`; show the text if there is one. */
function resultMessage(result: unknown): string | undefined {
  if (typeof result === "string" && result !== "") {
    return result;
  }
  if (typeof result === "object" && result !== null && "message" in result) {
    const { message } = result;
    return typeof message === "string" && message !== "" ? message : undefined;
  }
  return undefined;
}
