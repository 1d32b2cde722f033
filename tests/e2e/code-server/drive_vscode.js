// Drives VS Code (code-server) in headless Chromium through the TL extension's user-facing features and
// prints one JSON line `RESULT {...}` with what it saw; tests/e2e/test_vscode_e2e.py asserts on it.
// Lives beside code-server's package.json so that `require("playwright-core")` resolves there.
//
// Usage: node drive_vscode.js '{"url": ..., "chromium": ..., "artifacts": ..., "errorFile": ..., ...}'
// The selectors are VS Code 1.100 internals (code-server 4.100.3 is pinned for that reason).
"use strict";

const fs = require("fs");
const path = require("path");
const { chromium } = require("playwright-core");

const config = JSON.parse(process.argv[2]);
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 60000;
const result = { steps: {}, screenshots: [], console: [] };

function log(message) {
  // stderr: pytest shows it on failure; stdout carries only the RESULT line.
  process.stderr.write(`[drive_vscode ${new Date().toISOString().slice(11, 23)}] ${message}\n`);
}

async function screenshot(page, name) {
  const file = path.join(config.artifacts, `${name}.png`);
  await page.screenshot({ path: file });
  result.screenshots.push(file);
  log(`screenshot ${file}`);
}

/** Runs one step; a failure is recorded (with a screenshot) and the later steps still run. */
async function step(page, name, body) {
  const started = Date.now();
  try {
    const data = await body();
    result.steps[name] = { ok: true, ms: Date.now() - started, ...data };
    log(`step ${name} ok in ${Date.now() - started} ms`);
  } catch (error) {
    result.steps[name] = { ok: false, ms: Date.now() - started, error: String(error && error.stack || error) };
    log(`step ${name} FAILED: ${error}`);
    await screenshot(page, `failed-${name}`).catch(() => undefined);
  }
}

async function runCommand(page, title) {
  await page.keyboard.press("Escape");
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: STEP_TIMEOUT_MS });
  await input.fill(`>${title}`);
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first();
  await row.waitFor({ state: "visible", timeout: STEP_TIMEOUT_MS });
  await page.keyboard.press("Enter");
}

async function openFile(page, name) {
  // Quick Open finds the file even when the Explorer tree has not rendered its row.
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: STEP_TIMEOUT_MS });
  await input.fill(name);
  // The row whose file name is exactly `name` (fuzzy matching also lists e.g. mha_fwd.launch.json).
  const label = page.locator(".label-name", { hasText: new RegExp(`^${name.replace(/[.]/g, "\\.")}$`) });
  const row = page.locator(".quick-input-list .monaco-list-row").filter({ has: label }).first();
  await row.waitFor({ state: "visible", timeout: STEP_TIMEOUT_MS });
  await row.click();
  await page.locator(".tabs-container .tab.active", { hasText: name }).waitFor({ timeout: STEP_TIMEOUT_MS });
  await page.locator(".monaco-editor .view-lines").first().waitFor({ timeout: STEP_TIMEOUT_MS });
}

/** The visible lines of the active editor (Monaco renders spaces as U+00A0). */
async function editorText(page) {
  const text = await page.locator(".editor-instance .monaco-editor .view-lines").first().innerText();
  return text.replace(/\u00a0/g, " ");
}

async function problemRows(page) {
  const rows = page.locator(".markers-panel .monaco-list-row");
  return rows.allInnerTexts();
}

async function openProblems(page) {
  if (!(await page.locator(".markers-panel").isVisible())) {
    await page.keyboard.press("Control+Shift+M");
  }
  await page.locator(".markers-panel").waitFor({ state: "visible", timeout: STEP_TIMEOUT_MS });
}

async function waitFor(predicate, what, timeoutMs = STEP_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** The token span in the active editor whose text is exactly `word`. */
function token(page, word) {
  return page
    .locator(".editor-instance .monaco-editor .view-line span span", { hasText: new RegExp(`^${word}$`) })
    .first();
}

/** Hovers `word` until a hover with text shows: one mouse hover can be lost (a panel opening or a
 * toast moves the editor under the pointer), so it moves away and hovers again every few seconds. */
async function hoverText(page, word, what) {
  return waitFor(async () => {
    await page.mouse.move(5, 5);
    await page.keyboard.press("Escape");
    await token(page, word).hover();
    const hover = page.locator(".monaco-hover-content:visible").first();
    try {
      await hover.waitFor({ state: "visible", timeout: 3000 });
    } catch {
      return null;
    }
    const t = (await page.locator(".monaco-hover-content:visible").allInnerTexts()).join("\n").trim();
    return t.length > 0 ? t : null;
  }, what);
}

async function main() {
  fs.mkdirSync(config.artifacts, { recursive: true });
  const browser = await chromium.launch({
    executablePath: config.chromium,
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
  const page = await context.newPage();
  page.on("console", (msg) => {
    if (msg.type() === "error" && result.console.length < 50) {
      result.console.push(msg.text());
    }
  });
  page.setDefaultTimeout(STEP_TIMEOUT_MS);

  try {
    if (config.scenario === "startFailure") {
      await startFailure(page);
    } else {
      await features(page);
    }
  } finally {
    // launch() gave the browser a fresh temporary profile; close() removes it.
    await browser.close();
    process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
  }
}

async function openWorkbench(page) {
  await step(page, "workbench", async () => {
    await page.goto(`${config.url}/?folder=${encodeURIComponent(config.workspace)}`);
    await page.locator(".monaco-workbench").waitFor({ timeout: STEP_TIMEOUT_MS });
    await page.locator(".explorer-folders-view, .explorer-viewlet").first().waitFor({ timeout: STEP_TIMEOUT_MS });
    return {};
  });
}

/** code-server was started with a server command that cannot run: the user must be told which and why. */
async function startFailure(page) {
  await openWorkbench(page);
  await step(page, "startFailure", async () => {
    await openFile(page, config.errorFile);
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "could not start" }).first();
    await toast.waitFor({ timeout: STEP_TIMEOUT_MS });
    const text = (await toast.innerText()).replace(/\u00a0/g, " ");
    await screenshot(page, "06-server-start-failure");
    return { text };
  });
}

/** The user-facing features, in one session: diagnostics, status bar, hover, quick fix, Generate CUDA. */
async function features(page) {
  await openWorkbench(page);
  await step(page, "diagnostics", async () => {
    await openFile(page, config.errorFile);
    await page.locator(".editor-instance .monaco-editor .squiggly-error").first()
      .waitFor({ timeout: STEP_TIMEOUT_MS });
    const squiggles = await page.locator(".editor-instance .monaco-editor .squiggly-error").count();
    await openProblems(page);
    const rows = await waitFor(async () => {
      const texts = await problemRows(page);
      return texts.some((t) => t.includes(config.expectCode)) ? texts : null;
    }, `a Problems row with ${config.expectCode}`);
    await screenshot(page, "01-diagnostics");
    return { squiggles, problems: rows };
  });

  await step(page, "statusBar", async () => {
    const item = page.locator(".statusbar-item", { hasText: "TL " }).first();
    await item.waitFor({ timeout: STEP_TIMEOUT_MS });
    return { text: await item.innerText() };
  });

  await step(page, "hover", async () => {
    await token(page, config.hoverWord).waitFor({ timeout: STEP_TIMEOUT_MS });
    const text = await hoverText(page, config.hoverWord, "hover text");
    await page.waitForTimeout(400); // let the hover's fade-in finish before the screenshot
    await screenshot(page, "02-hover");
    await page.keyboard.press("Escape");
    return { word: config.hoverWord, text };
  });

  await step(page, "quickFix", async () => {
    const before = await editorText(page);
    // Put the cursor on the first problem, close the peek widget, then ask for code actions.
    await page.locator(".editor-instance .monaco-editor .view-lines").first().click();
    await runCommand(page, "Go to Next Problem in Files (Error, Warning, Info)");
    await page.waitForTimeout(500);
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+.");
    const action = page.locator(".action-widget .monaco-list-row", { hasText: config.fixTitle }).first();
    await action.waitFor({ state: "visible", timeout: STEP_TIMEOUT_MS });
    const offered = await page.locator(".action-widget .monaco-list-row").allInnerTexts();
    await screenshot(page, "03-quick-fix-menu");
    // The menu keeps focus and a pointer-blocking overlay: choose with the keyboard, not a click.
    for (let i = 0; i < offered.length; i++) {
      const focused = page.locator(".action-widget .monaco-list-row.focused");
      if ((await focused.count()) > 0 && (await focused.first().innerText()).includes(config.fixTitle)) {
        break;
      }
      await page.keyboard.press("ArrowDown");
    }
    await page.keyboard.press("Enter");
    await waitFor(async () => {
      const texts = await problemRows(page);
      return texts.every((t) => !t.includes(config.expectCode)) ? true : null;
    }, `the ${config.expectCode} problem to disappear`);
    const after = await editorText(page);
    const squiggles = await page.locator(".editor-instance .monaco-editor .squiggly-error").count();
    await screenshot(page, "04-quick-fix-applied");
    return { offered, before, after, squigglesAfter: squiggles, problemsAfter: await problemRows(page) };
  });

  await step(page, "generateCuda", async () => {
    await openFile(page, config.exampleFile);
    await runCommand(page, "TL: Generate CUDA");
    const tab = page.locator(".tabs-container .tab.active", { hasText: ".cu" }).first();
    // The server reports a failed generation with window/showMessage: stop at that toast, with its text.
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "TL:" }).first();
    await tab.or(toast).waitFor({ timeout: config.generateTimeoutMs ?? STEP_TIMEOUT_MS });
    if (!(await tab.isVisible())) {
      throw new Error(`Generate CUDA failed: ${(await toast.innerText()).replace(/\u00a0/g, " ")}`);
    }
    const text = await waitFor(async () => {
      const t = await editorText(page);
      return t.length > 0 ? t : null;
    }, "the .cu editor's text");
    await screenshot(page, "05-generate-cuda");
    return { tab: (await tab.innerText()).trim(), head: text.slice(0, 2000) };
  });

  await step(page, "restartServer", async () => {
    await openFile(page, config.exampleFile);
    await runCommand(page, "TL: Restart Server");
    // Hover needs the server: an answer after the restart shows that the new process serves the file.
    const text = await hoverText(page, config.hoverWord, "hover from the restarted server");
    return { hover: text };
  });
}

main().catch((error) => {
  log(`fatal: ${error && error.stack || error}`);
  process.stdout.write(`RESULT ${JSON.stringify({ ...result, fatal: String(error) })}\n`);
  process.exit(1);
});
