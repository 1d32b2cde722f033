// Reads the `tl.server.*` settings and turns them into the process the client spawns. Language settings
// (`tl.target`, `tl.onSave`, ...) are not read here: the server pulls them through workspace/configuration.
import * as vscode from "vscode";
import { CONFIG_SECTION } from "./constants";

export interface ServerLaunch {
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd: string | undefined;
  /** Which setting chose the program: named in the error message when it cannot start. */
  setting: "tl.server.python" | "tl.server.command";
}

/** Settings whose change means the server process must be restarted. */
const RESTART_KEYS = ["server.command", "server.python", "server.module", "server.env"];

export function readServerLaunch(): ServerLaunch {
  const config = vscode.workspace.getConfiguration(CONFIG_SECTION);
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const expand = (value: string): string =>
    folder === undefined ? value : value.split("${workspaceFolder}").join(folder);

  const python = expand(config.get<string>("server.python", "").trim());
  const module = config.get<string>("server.module", "tl_language.cli").trim() || "tl_language.cli";
  const command = config.get<string[]>("server.command", ["tl", "lsp"]).map(expand);
  const env = config.get<Record<string, string>>("server.env", {});

  if (python !== "") {
    return { command: python, args: ["-m", module, "lsp"], env, cwd: folder, setting: "tl.server.python" };
  }
  const [program, ...args] = command.length > 0 ? command : ["tl", "lsp"];
  return { command: program, args, env, cwd: folder, setting: "tl.server.command" };
}

export function describeLaunch(launch: ServerLaunch): string {
  return [launch.command, ...launch.args].join(" ");
}

export function needsRestart(event: vscode.ConfigurationChangeEvent): boolean {
  return RESTART_KEYS.some((key) => event.affectsConfiguration(`${CONFIG_SECTION}.${key}`));
}

/** The default target for files without a `Target` line, shown in the status bar. */
export function defaultTarget(scope?: vscode.Uri): string {
  return vscode.workspace.getConfiguration(CONFIG_SECTION, scope).get<string>("target", "sm_80");
}
