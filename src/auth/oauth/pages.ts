import type { Reply } from '../../http/uws.js';

// The few pages a person sees from the server during browser login. Every value is escaped;
// no stack trace or internal detail is ever shown (those go to the log). The headers forbid
// caching, framing, referrers (URLs here carry state and codes) and any script.

export const PAGE_HEADERS: Record<string, string> = {
  'cache-control': 'no-store',
  pragma: 'no-cache',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'none'",
};

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

/** A complete, self-contained HTML page; `title`, `message` and `hint` are plain text. */
export function htmlPage(title: string, message: string, hint?: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>burrow · ${escapeHtml(title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}p.hint{color:#555}code{background:#f3f3f3;padding:0 .25rem}</style></head>
<body><h1>${escapeHtml(title)}</h1><p>${escapeHtml(message)}</p>${hint ? `<p class="hint">${escapeHtml(hint)}</p>` : ''}</body></html>
`;
}

export function pageReply(status: number, title: string, message: string, hint?: string): Reply {
  return { status, headers: { ...PAGE_HEADERS, 'content-type': 'text/html; charset=utf-8' }, body: htmlPage(title, message, hint) };
}

export function redirectReply(location: string, extra: Record<string, string> = {}): Reply {
  return { status: 302, headers: { ...PAGE_HEADERS, location, ...extra }, body: '' };
}

export const RETRY_HINT = 'Run `burrow login` again to start a new login.';
