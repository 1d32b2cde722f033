// Entry point: wires logging, the server process, the palette commands and the status bar together.
// The extension holds no language logic; everything TL-specific lives in the Python server.
import * as vscode from "vscode";
import { LanguageClient } from "vscode-languageclient/node";
import { registerCommands } from "./common/commands";
import { RESULT_NOTIFICATION, SERVER_NAME } from "./common/constants";
import { createLogChannel } from "./common/logging";
import { ServerManager } from "./common/server";
import { needsRestart } from "./common/settings";
import { ResultParams, TlStatusBar } from "./common/statusBar";

let manager: ServerManager | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const channel = createLogChannel(SERVER_NAME);
  const statusBar = new TlStatusBar();
  const onClient = (client: LanguageClient): void => {
    client.onNotification(RESULT_NOTIFICATION, (result: ResultParams) => statusBar.setResult(result));
  };
  manager = new ServerManager(channel, onClient);
  const servers = manager;

  context.subscriptions.push(
    channel,
    statusBar,
    servers,
    ...registerCommands(() => servers.current, () => servers.restart(), (result) => statusBar.setResult(result)),
    vscode.window.onDidChangeActiveTextEditor((editor) => statusBar.refresh(editor)),
    vscode.workspace.onDidChangeTextDocument((event) => {
      if (event.document === vscode.window.activeTextEditor?.document) {
        statusBar.refresh();
      }
    }),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      statusBar.refresh();
      if (needsRestart(event)) {
        await servers.restart();
      }
    }),
  );
  statusBar.refresh();
  await servers.start();
}

export async function deactivate(): Promise<void> {
  await manager?.stop();
}
