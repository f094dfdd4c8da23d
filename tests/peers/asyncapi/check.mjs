// Validates an AsyncAPI document with the official parser (@asyncapi/parser): the
// AsyncAPI JSON Schema plus its Spectral ruleset. Reads the document on stdin; prints
// {"diagnostics": [{severity, code, message, path}]} on stdout; exits 0 when the parser
// built a document (errors, severity 0, leave none), 1 otherwise.
import { Parser } from '@asyncapi/parser';

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const parser = new Parser();
const { document, diagnostics } = await parser.parse(Buffer.concat(chunks).toString('utf8'));
const out = diagnostics.map((d) => ({ severity: d.severity, code: String(d.code), message: d.message, path: d.path.join('/') }));
process.stdout.write(JSON.stringify({ parsed: document !== undefined, diagnostics: out }) + '\n');
process.exit(document !== undefined ? 0 : 1);
