import { bodyAsText, visitorUrl } from './har.js';
import type { Capture, Header } from './store.js';

// "Copy as cURL": a command that sends the captured request again, to the tunnel's public URL
// (so through burrowd and its access rules, like the visitor's), pasted into a POSIX shell.
// Everything variable is single-quoted: request data is hostile, and a quote, `$(…)` or a
// backtick in a header or body must reach curl as text, never run.

// Set again on the way in by the edge, or computed by curl itself from the URL and body.
const LEFT_TO_CURL = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'expect', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-real-ip']);

/** One shell word: single quotes, each ' as '\'' (the only character they cannot hold). */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** A printf format that writes `bytes` exactly (octal escapes for all but plain printables). */
function printfBytes(bytes: Buffer): string {
  let out = '';
  for (const b of bytes) out += b >= 0x20 && b < 0x7f && b !== 0x25 && b !== 0x5c && b !== 0x27 ? String.fromCharCode(b) : `\\${b.toString(8).padStart(3, '0')}`;
  return out;
}

function has(headers: readonly Header[], lower: string): boolean {
  return headers.some(([n]) => n.toLowerCase() === lower);
}

/**
 * `withCredentials`: on a basic-auth tunnel, `-u USER:PASS` with the tunnel's credential, so the
 * command gets past the edge (which removed the visitor's Authorization before capture).
 */
export function curlCommand(c: Capture, withCredentials = false): string {
  const url = visitorUrl(c);
  const body = c.request.body();
  const first: string[] = [];
  if (c.method === 'HEAD') first.push('--head');
  else if (!(c.method === 'GET' && body.length === 0) && !(c.method === 'POST' && body.length > 0)) {
    first.push('-X', /^[A-Za-z0-9_-]+$/.test(c.method) ? c.method : shellQuote(c.method));
  }
  // curl reads [] and {} in a URL as globs, and removes /./ and /../ unless told not to.
  if (/[[\]{}]/.test(url)) first.push('--globoff');
  if (/(^|\/)\.\.?(\/|$)/.test(c.path.split('?')[0]!)) first.push('--path-as-is');
  first.push(shellQuote(url));
  const options = c.request.headers.filter(([n]) => !LEFT_TO_CURL.has(n.toLowerCase())).map(([n, v]) => `-H ${shellQuote(`${n}: ${v}`)}`);
  if (withCredentials && c.credentials !== null) options.unshift(`-u ${shellQuote(c.credentials)}`);
  let stdin = '';
  if (body.length > 0) {
    // -d would add a form Content-Type the visitor did not send: an empty -H removes it.
    if (!has(c.request.headers, 'content-type')) options.push(`-H ${shellQuote('Content-Type:')}`);
    const text = bodyAsText(body, undefined);
    if (text !== null && !text.includes('\0')) options.push(`--data-raw ${shellQuote(text)}`);
    else {
      stdin = `printf ${shellQuote(printfBytes(body))} | `;
      options.push('--data-binary @-');
    }
  }
  // One option a line, as browsers' "copy as cURL" does, so a long request stays readable.
  return [`${stdin}curl ${first.join(' ')}`, ...options.map((o) => `  ${o}`)].join(' \\\n');
}
