// Tokenizes TL with the extension's TextMate grammar through vscode-textmate + Oniguruma (the engine VS Code
// uses), so colouring is checked without an editor. Run: `npm test` (node's built-in test runner).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import oniguruma from "vscode-oniguruma";
import textmate from "vscode-textmate";

const require = createRequire(import.meta.url);
const here = (p) => fileURLToPath(new URL(p, import.meta.url));

await oniguruma.loadWASM(readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm")).buffer);
const registry = new textmate.Registry({
  onigLib: Promise.resolve({
    createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
    createOnigString: (s) => new oniguruma.OnigString(s),
  }),
  loadGrammar: async (scopeName) =>
    scopeName === "source.tl"
      ? textmate.parseRawGrammar(readFileSync(here("../syntaxes/tl.tmLanguage.json"), "utf8"), "tl.tmLanguage.json")
      : null,
});
const grammar = await registry.loadGrammar("source.tl");

/** [text, innermost scope] for every token of one line. */
function tokens(line) {
  const { tokens: ts } = grammar.tokenizeLine(line, textmate.INITIAL);
  return ts.map((t) => [line.slice(t.startIndex, t.endIndex), t.scopes[t.scopes.length - 1]]);
}

function scopeOf(line, text) {
  const hit = tokens(line).find(([t]) => t === text);
  assert.ok(hit, `no token ${JSON.stringify(text)} in ${JSON.stringify(tokens(line))}`);
  return hit[1];
}

test("statement keywords, case-insensitively", () => {
  assert.equal(scopeOf("Copy Q from global to shared", "Copy"), "keyword.other.statement.tl");
  assert.equal(scopeOf("COPY Q FROM GLOBAL TO SHARED", "COPY"), "keyword.other.statement.tl");
  assert.equal(scopeOf("allocate S in register (BM, BN)", "allocate"), "keyword.other.statement.tl");
  assert.equal(scopeOf("Kernel mha_fwd", "Kernel"), "keyword.other.header.tl");
  assert.equal(scopeOf("Kernel mha_fwd", "mha_fwd"), "entity.name.function.kernel.tl");
});

test("memory levels and clauses", () => {
  const line = "Copy K (BN, d) in coordinate [L = j] from global to shared";
  assert.equal(scopeOf(line, "global"), "storage.modifier.level.tl");
  assert.equal(scopeOf(line, "shared"), "storage.modifier.level.tl");
  assert.equal(scopeOf(line, "coordinate"), "keyword.other.clause.tl");
  assert.equal(scopeOf("Copy Q from Shared to REGISTER", "REGISTER"), "storage.modifier.level.tl");
});

test("the op after Compute, and loops", () => {
  assert.equal(scopeOf("Compute GEMM Q, K and get S", "GEMM"), "support.function.op.tl");
  assert.equal(scopeOf("    Compute Softmax S", "Softmax"), "support.function.op.tl");
  assert.equal(scopeOf("for j = 0: seqlen_k / BN", "for"), "keyword.control.loop.for.tl");
  assert.equal(scopeOf("for j = 0: seqlen_k / BN", "j"), "variable.other.loop.tl");
  assert.equal(scopeOf("end", "end"), "keyword.control.loop.end.tl");
});

test("numbers, holes, operators, comments", () => {
  assert.equal(scopeOf("Param BM = 128  # rows", "128"), "constant.numeric.integer.tl");
  assert.equal(scopeOf("Param BM = 128  # rows", "BM"), "variable.other.constant.param.tl");
  assert.equal(scopeOf("Param BN = ?", "?"), "invalid.deprecated.hole.tl");
  assert.equal(scopeOf("for j = 0: seqlen_k / BN", "/"), "keyword.operator.tl");
  assert.equal(scopeOf("Compute Softmax S  # running max", " running max"), "comment.line.number-sign.tl");
  // Keywords inside a comment stay comment.
  assert.ok(tokens("# Copy from global to shared").every(([, s]) => s.startsWith("comment") || s.startsWith("punctuation")));
});

test("layouts in Reshape", () => {
  const line = "Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)";
  assert.equal(scopeOf(line, "Reshape"), "keyword.other.statement.tl");
  assert.equal(scopeOf(line, "MMA_C"), "constant.language.layout.tl");
  assert.equal(scopeOf(line, "MMA_N_new"), "constant.language.layout.tl");
});

test("every bundled example tokenizes with no line left unscoped", () => {
  for (const name of ["mha_fwd", "causal_mha_fwd", "gqa_fwd", "mla_fwd", "mqa_fwd", "sketch_fwd"]) {
    const text = readFileSync(here(`../../examples/${name}.tl`), "utf8");
    let state = textmate.INITIAL;
    for (const line of text.split("\n")) {
      const result = grammar.tokenizeLine(line, state);
      state = result.ruleStack;
      const first = line.trimStart().split(/\s+/)[0];
      if (first !== "" && !first.startsWith("#")) {
        const scope = scopeOf(line, first);
        assert.match(scope, /^(keyword|storage)\./, `${name}: ${line}`);
      }
    }
  }
});
