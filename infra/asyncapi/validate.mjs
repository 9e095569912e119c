// Validates AsyncAPI documents with the AsyncAPI parser (the one the AsyncAPI
// CLI and Studio use: schema, references, spectral rules).
// Usage: node validate.mjs <document.json>   (or "-" for stdin)
//   One document: exit 0 if valid, no errors; exit 1 with the diagnostics, one
//   JSON line each, on stderr.
//   A JSON array of documents (one node start for many): one JSON line per
//   document on stdout, {"valid": bool, "version", "errors": [...]}; exit 0.
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

async function check(source) {
  const { document, diagnostics } = await parser.parse(source);
  const lines = diagnostics.map((d) => ({ severity: d.severity, code: d.code, message: d.message, path: d.path }));
  const errors = lines.filter((d) => d.severity === DiagnosticSeverity.Error);
  return { document, lines, errors, valid: document !== undefined && errors.length === 0 };
}

let many;
try {
  many = JSON.parse(text);
} catch {
  many = undefined; // not JSON (YAML): one document
}
if (Array.isArray(many)) {
  for (const doc of many) {
    const { document, errors, valid } = await check(JSON.stringify(doc));
    console.log(JSON.stringify({ valid, version: valid ? document.version() : null, errors }));
  }
  process.exit(0);
}

const { document, lines, errors, valid } = await check(text);
for (const line of lines) {
  (line.severity === DiagnosticSeverity.Error ? console.error : console.log)(JSON.stringify(line));
}
if (!valid) {
  console.error(`invalid: ${errors.length} error(s)`);
  process.exit(1);
}
console.log(`valid: AsyncAPI ${document.version()}, ${document.channels().length} channel(s), ${document.allMessages().length} message(s)`);
