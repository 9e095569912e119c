// Validates an AsyncAPI document with the AsyncAPI parser (the one the
// AsyncAPI CLI and Studio use: schema, references, spectral rules).
// Usage: node validate.mjs <document.json>   (or "-" for stdin)
// Exit 0: valid, no errors. Exit 1: the diagnostics, one JSON line each, on stderr.
// Exit 2: usage or unreadable file.
import { readFileSync } from "node:fs";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const path = process.argv[2];
if (!path) {
  console.error("usage: node validate.mjs <document.json|->");
  process.exit(2);
}
let text;
try {
  text = readFileSync(path === "-" ? 0 : path, "utf8");
} catch (err) {
  console.error(`cannot read ${path}: ${err.message}`);
  process.exit(2);
}

const parser = new Parser();
const { document, diagnostics } = await parser.parse(text);
const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
for (const d of diagnostics) {
  const line = { severity: d.severity, code: d.code, message: d.message, path: d.path };
  (d.severity === DiagnosticSeverity.Error ? console.error : console.log)(JSON.stringify(line));
}
if (document === undefined || errors.length > 0) {
  console.error(`invalid: ${errors.length} error(s)`);
  process.exit(1);
}
console.log(`valid: AsyncAPI ${document.version()}, ${document.channels().length} channel(s), ${document.allMessages().length} message(s)`);
