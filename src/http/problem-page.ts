import type { Problem } from '../errors.js';

// Visitors of a tunnel are often people with a browser: for them an error (unknown tunnel,
// local service down or slow, too many requests, shutting down) is a small HTML page instead of
// problem+json. Self-contained (no external assets: it must render when nothing else answers)
// and every value escaped (the detail may carry a tunnel id taken from the visitor's Host).

/** True when `accept` names text/html with a higher weight than any JSON type it names. */
export function prefersHtml(accept: string | undefined): boolean {
  if (!accept) return false;
  let html = 0;
  let json = 0;
  for (const part of accept.split(',')) {
    const [type = '', ...params] = part.split(';').map((s) => s.trim().toLowerCase());
    let q = 1;
    for (const p of params) {
      const m = /^q=([0-9.]+)$/.exec(p);
      if (m) q = Math.min(1, Number(m[1]) || 0);
    }
    if (type === 'text/html' || type === 'application/xhtml+xml') html = Math.max(html, q);
    else if (type === 'application/json' || type === 'application/problem+json') json = Math.max(json, q);
  }
  // A wildcard alone (curl's */*) keeps JSON: scripts get what they parse.
  return html > 0 && html > json;
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function problemPage(p: Problem): string {
  const title = escapeHtml(`${p.status} ${p.title}`);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${title}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:10vh auto;padding:0 1em;color:#222}h1{font-size:1.6em;margin:0 0 .3em}p{margin:.4em 0}.s{color:#888}</style>
</head><body>
<h1>${title}</h1>
<p>${escapeHtml(p.detail)}</p>
<p class="s">burrow · ${escapeHtml(p.type)}</p>
</body></html>
`;
}
