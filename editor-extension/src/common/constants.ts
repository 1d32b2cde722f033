// Names shared by the extension's modules. The server's command ids are the ones it advertises in
// `executeCommandProvider`; the extension's own palette commands wrap them (see commands.ts for why).

export const LANGUAGE_ID = "tl";
export const CONFIG_SECTION = "tl";
export const SERVER_ID = "tl";
export const SERVER_NAME = "TL Language Server";

/** Custom notification the server sends after a check, compile, verify or benchmark finishes. */
export const RESULT_NOTIFICATION = "tl/result";

/** Server-side commands (workspace/executeCommand), each taking the document URI as first argument. */
export const ServerCommand = {
  generateCuda: "tl.generateCuda",
  verify: "tl.verify",
  benchmark: "tl.benchmark",
  verifyBackward: "tl.verifyBackward",
  benchmarkBackward: "tl.benchmarkBackward",
  format: "tl.format",
  restartWorker: "tl.restartWorker",
} as const;

/** Commands the extension contributes to the palette. */
export const EditorCommand = {
  generateCuda: "tl.editor.generateCuda",
  verify: "tl.editor.verify",
  benchmark: "tl.editor.benchmark",
  verifyBackward: "tl.editor.verifyBackward",
  benchmarkBackward: "tl.editor.benchmarkBackward",
  format: "tl.editor.format",
  restartServer: "tl.editor.restartServer",
  restartWorker: "tl.editor.restartWorker",
  showLog: "tl.editor.showLog",
} as const;
