// Starts, stops and restarts the language client around the `tl lsp` process. A server that cannot start
// is reported once, with the exact command and the error, instead of a silent dead client.
import * as vscode from "vscode";
import {
  CloseAction,
  ErrorAction,
  Executable,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { CONFIG_SECTION, LANGUAGE_ID, SERVER_ID, SERVER_NAME } from "./constants";
import { describeError, showLog, traceError, traceInfo } from "./logging";
import { ServerLaunch, describeLaunch, readServerLaunch } from "./settings";

/** Restarts allowed after a crash of a server that was running, within CRASH_WINDOW_MS. */
const MAX_CRASH_RESTARTS = 4;
const CRASH_WINDOW_MS = 3 * 60 * 1000;

export type ClientHook = (client: LanguageClient) => void;

export class ServerManager implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private crashes: number[] = [];
  private everRunning = false;

  constructor(
    private readonly channel: vscode.LogOutputChannel,
    private readonly onClient: ClientHook,
  ) {}

  get current(): LanguageClient | undefined {
    return this.client?.state === State.Running ? this.client : undefined;
  }

  async start(): Promise<void> {
    const launch = readServerLaunch();
    traceInfo(`Starting ${SERVER_NAME}: ${describeLaunch(launch)} (cwd ${launch.cwd ?? process.cwd()})`);
    const client = this.createClient(launch);
    this.client = client;
    this.everRunning = false;
    this.onClient(client);
    try {
      await client.start();
      this.everRunning = true;
      traceInfo(`${SERVER_NAME} is running.`);
    } catch (error) {
      this.client = undefined;
      await reportStartFailure(launch, error);
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client === undefined) {
      return;
    }
    try {
      await client.stop(2000);
    } catch (error) {
      traceError("Stopping the server failed", error);
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    this.crashes = [];
    await this.start();
  }

  dispose(): void {
    void this.stop();
  }

  private createClient(launch: ServerLaunch): LanguageClient {
    const executable: Executable = {
      command: launch.command,
      args: launch.args,
      transport: TransportKind.stdio,
      options: { cwd: launch.cwd, env: { ...process.env, ...launch.env } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: LANGUAGE_ID },
        { scheme: "untitled", language: LANGUAGE_ID },
      ],
      synchronize: { configurationSection: CONFIG_SECTION },
      outputChannel: this.channel,
      traceOutputChannel: this.channel,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationFailedHandler: (error) => {
        traceError("The server failed to initialize", error);
        return false;
      },
      errorHandler: {
        error: (error, _message, count) => {
          traceError("Connection error", error);
          return { action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true };
        },
        closed: () => this.onClosed(launch),
      },
    };
    return new LanguageClient(SERVER_ID, SERVER_NAME, executable, clientOptions);
  }

  /** A crash of a running server restarts it a few times; a server that never ran is not retried. */
  private onClosed(launch: ServerLaunch): { action: CloseAction; handled: boolean } {
    if (!this.everRunning) {
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    const now = Date.now();
    this.crashes = this.crashes.filter((t) => now - t < CRASH_WINDOW_MS);
    this.crashes.push(now);
    if (this.crashes.length <= MAX_CRASH_RESTARTS) {
      traceError(`${SERVER_NAME} exited; restarting (${this.crashes.length}/${MAX_CRASH_RESTARTS})`);
      return { action: CloseAction.Restart, handled: true };
    }
    void showFailure(
      `${SERVER_NAME} exited ${this.crashes.length} times in 3 minutes and will not be restarted. ` +
        `Command: \`${describeLaunch(launch)}\`. Use "TL: Restart Server" after fixing it.`,
    );
    return { action: CloseAction.DoNotRestart, handled: true };
  }
}

async function reportStartFailure(launch: ServerLaunch, error: unknown): Promise<void> {
  const reason = describeError(error);
  traceError(`Could not start ${SERVER_NAME} with \`${describeLaunch(launch)}\``, error);
  const hint = !reason.includes("ENOENT")
    ? " See the output channel for the server's stderr."
    : launch.setting === "tl.server.python"
      ? " The interpreter was not found: check `tl.server.python`."
      : " The program was not found: install the `tl-attention` package (pip install 'tl-attention[server]')" +
        " or set `tl.server.python` to an interpreter that has it.";
  await showFailure(`${SERVER_NAME} could not start. Command: \`${describeLaunch(launch)}\`. Error: ${reason}.${hint}`);
}

async function showFailure(message: string): Promise<void> {
  const choice = await vscode.window.showErrorMessage(message, "Show Log", "Open Settings");
  if (choice === "Show Log") {
    showLog();
  } else if (choice === "Open Settings") {
    await vscode.commands.executeCommand("workbench.action.openSettings", "tl.server");
  }
}
