// The HTTP/1.1 conformance cases, as data: what a visitor writes, what the origin answers, and
// a judge of what the visitor read back and what reached the origin. The rules are RFC 9112 /
// RFC 9110's for an intermediary, and the request-smuggling classes of PortSwigger's research
// and the HTTP Garden. Where the RFC allows more than one behaviour (refuse, or repair and
// forward), every allowed one passes, for every subject alike.
import { defaultAnswer, type OriginAnswer, type OriginRequest } from './origin.js';
import type { Write } from './visitor.js';
import type { Response } from './visitor.js';
import {
  all, atOrigin, check, refusedHeadOnly, cleanlyFramed, closed, either, fields, noForeignResponse, nothingForwarded, notSmuggled, refused, served, silentlyClosed, http2Preface,
  type Judge, type Run,
} from './judge.js';

export type Group = 'compliance' | 'smuggling' | 'malformed' | 'connection' | 'response';
export const GROUPS: Group[] = ['compliance', 'smuggling', 'malformed', 'connection', 'response'];

/** What a case's bytes are built from: the subject's Host and the case's path prefix. */
export interface Ctx {
  host: string;
  /** `/c/<id>`: every target of the case starts with it, so the origin knows the case. */
  p: string;
}

export interface Case {
  id: string;
  group: Group;
  title: string;
  /** The RFC clause or research the case checks. */
  source: string;
  send(c: Ctx): Write[];
  /** Final responses after which the visitor waits only briefly for a close (default 1; 0: until close or deadline). */
  expect?: number;
  /** Indexes of final responses that answer a HEAD. */
  head?: number[];
  /** The origin's answer for this case's requests (default: 200 `ok:<target>`). */
  origin?(q: OriginRequest): OriginAnswer | null;
  judge: Judge;
}

// ---- building blocks ------------------------------------------------------------------------------

const get = (c: Ctx, path: string, extra = ''): string => `GET ${c.p}${path} HTTP/1.1\r\nHost: ${c.host}\r\n${extra}\r\n`;
const smuggled = (c: Ctx): string => get(c, '/smuggled');
const paths = (...ps: string[]) => (p: string) => ps.map((x) => `${p}${x}`);
const one = (path: string, opts?: Parameters<typeof served>[1]) => served(paths(path), opts);

/** The origin got request `suffix` with exactly this payload. */
const bodyIs = (suffix: string, want: string | ((r: Run) => string)): Judge => (r) => {
  const w = typeof want === 'string' ? want : want(r);
  return atOrigin(suffix, (q) => (q.body.toString('latin1') === w ? null : `origin body ${JSON.stringify(q.body.toString('latin1').slice(0, 60))}, want ${JSON.stringify(w.slice(0, 60))}`))(r);
};

/** A served request whose payload reached the origin intact. */
const servedWithBody = (suffix: string, body: string, opts?: Parameters<typeof served>[1]): Judge => all(one(suffix, opts), bodyIs(suffix, body));

/** Refused with one of `statuses`, closed, nothing reached the origin (the smuggled request least of all). */
const mustRefuse = (statuses: number[], opts?: { close?: boolean }): Judge => all(refused(statuses, opts), notSmuggled());

/** A forwarded head carries no field `name`. */
const lacks = (suffix: string, name: string): Judge => atOrigin(suffix, (q) => (fields(q.head).some(([n]) => n === name) ? `${name} reached the origin` : null));

/** CL and TE together, TE honoured: the origin sees one framing, the smuggled bytes stay unanswered and the connection closes. */
const teWins = (suffix: string, body: string | ((r: Run) => string)): Judge =>
  all(
    one(suffix, { close: true }),
    bodyIs(suffix, body),
    atOrigin(suffix, (q) => {
      const names = fields(q.head).map(([n]) => n);
      return names.includes('content-length') && names.includes('transfer-encoding') ? 'forwarded with both Content-Length and Transfer-Encoding' : null;
    }),
    notSmuggled(),
  );

/** An invalid field line: 400 (SHOULD, RFC 9112 §2.2), or served with the line dropped. */
const badField = (name: string): Judge => either(mustRefuse([400]), all(one('/a'), atOrigin('/a', (q) => (q.head.includes(name) ? 'the invalid field line was forwarded' : null))));

/**
 * A body-framing error: refused with a 4xx and closed, and the origin never got a complete
 * request (a streaming intermediary may have sent the head on before the body went wrong).
 */
const mustRefuseBody = (statuses: number[]): Judge =>
  either(
    mustRefuse(statuses),
    all(refusedHeadOnly(statuses), notSmuggled(), check((r) => !r.origin.requests.some((q) => q.target.startsWith(`${r.p}/`)), 'the origin got a complete request')),
  );

const chunkOf = (s: string): string => `${Buffer.byteLength(s, 'latin1').toString(16)}\r\n${s}\r\n`;

const finals = (r: Run): Response[] => r.parsed.finals;

/** No byte of a forwarded head is a bare CR, NUL or an obs-fold. */
const headClean = (suffix: string): Judge =>
  atOrigin(suffix, (q) => (/\r(?!\n)|\0|\r\n[ \t]/.test(q.head) ? `forwarded as received: ${JSON.stringify(q.head.slice(0, 120))}` : null));

// ---- response-side building blocks ------------------------------------------------------------------

/** For response cases: the origin answers `/r` with these bytes and closes; the rest get the default. */
const odd = (bytes: string, close = true) => (q: OriginRequest): OriginAnswer | null => (q.target.endsWith('/r') ? { bytes, close } : null);

/**
 * An odd origin answer to `/r`, with `/next` pipelined after it. Passes when the visitor got a
 * 5xx for `/r` (or, with `closeOk`, a close before any answer, or a response cut off by a close),
 * or an answer `repaired` accepts; a later answer must be `/next`'s own; nothing injected by
 * the origin ever reaches the visitor.
 */
function oddResponse(opts: { repaired?: (x: Response, r: Run) => string | null; closeOk?: boolean; cutOk?: boolean; valid?: boolean }): Judge {
  return (r) => {
    const bad = (why: string) => ({ ok: false, why });
    const inj = noForeignResponse(r);
    if (!inj.ok) return inj;
    const f = finals(r);
    if (f.length === 0) {
      if (opts.closeOk && !opts.valid && r.visitor.closed) return { ok: true, why: '' };
      return bad(r.visitor.closed ? 'closed without a response' : 'no response');
    }
    const first = f[0]!;
    if (first.status >= 500 && first.status <= 599 && !opts.valid) {
      // fine: refused the origin's answer
    } else if (!first.complete || r.parsed.leftover.length > 0) {
      if (!(opts.cutOk && r.visitor.closed)) return bad(`response ${first.status} ${first.complete ? `followed by ${r.parsed.leftover.length} unframed bytes` : 'incomplete'}${r.visitor.closed ? '' : ', connection open'}`);
      return { ok: true, why: '' };
    } else {
      const why = opts.repaired ? opts.repaired(first, r) : `status ${first.status}`;
      if (why) return bad(why);
    }
    for (const x of f.slice(1)) {
      if (x.status !== 200 || x.body.toString('latin1') !== `ok:${r.p}/next`) return bad(`the next answer is not /next's own: ${x.status} ${JSON.stringify(x.body.toString('latin1').slice(0, 40))}`);
    }
    if (f.length > 2) return bad(`${f.length} responses for 2 requests`);
    if (r.parsed.leftover.length > 0 && !r.visitor.closed) return bad(`${r.parsed.leftover.length} B unframed after the answers`);
    return { ok: true, why: '' };
  };
}
/** An interim answer to `/r`, then the default final one. */
const interim = (bytes: string) => (q: OriginRequest): OriginAnswer | null => (q.target.endsWith('/r') ? { bytes: bytes + String(defaultAnswer(q).bytes) } : null);
const rWithNext = (c: Ctx): Write[] => [get(c, '/r') + get(c, '/next')];
const okBody = (x: Response, r: Run): string | null => (x.status === 200 && x.body.toString('latin1') === `ok:${r.p}/r` ? null : `got ${x.status} ${JSON.stringify(x.body.toString('latin1').slice(0, 40))}`);
const okHead = (target: string): string => `HTTP/1.1 200 OK\r\nContent-Length: ${`ok:${target}`.length}\r\n`;

// ---- the cases ------------------------------------------------------------------------------------

export const CASES: Case[] = [
  // ---- compliance: what an intermediary must serve ----
  { id: 'get', group: 'compliance', title: 'plain GET', source: 'RFC 9112 §3', send: (c) => [get(c, '/a')], judge: one('/a', { close: false }) },
  { id: 'http10', group: 'compliance', title: 'HTTP/1.0 GET with Host: served, then closed', source: 'RFC 9112 §9.3', send: (c) => [`GET ${c.p}/a HTTP/1.0\r\nHost: ${c.host}\r\n\r\n`], judge: one('/a', { close: true }) },
  {
    id: 'http10-nohost', group: 'compliance', title: 'HTTP/1.0 without Host: answered (Host is not required), then closed', source: 'RFC 9112 §3.2 (Host required of 1.1 only)',
    send: (c) => [`GET ${c.p}/a HTTP/1.0\r\n\r\n`],
    judge: all(check((r) => finals(r).length === 1 && finals(r)[0]!.complete && finals(r)[0]!.status < 500, (r) => `answers: ${finals(r).map((x) => x.status).join(',') || 'none'}`), closed),
  },
  {
    id: 'http10-keepalive', group: 'compliance', title: 'HTTP/1.0 keep-alive, two pipelined: both answered, or the first then a close', source: 'RFC 9112 §9.3, Appendix C.2.2',
    send: (c) => [`GET ${c.p}/a HTTP/1.0\r\nHost: ${c.host}\r\nConnection: keep-alive\r\n\r\nGET ${c.p}/b HTTP/1.0\r\nHost: ${c.host}\r\nConnection: keep-alive\r\n\r\n`],
    expect: 2,
    judge: either(served(paths('/a', '/b')), one('/a', { close: true })),
  },
  { id: 'pipeline-3', group: 'compliance', title: 'three pipelined GETs answered in order', source: 'RFC 9112 §9.3.2', send: (c) => [get(c, '/1') + get(c, '/2') + get(c, '/3')], expect: 3, judge: served(paths('/1', '/2', '/3'), { close: false }) },
  { id: 'post-cl', group: 'compliance', title: 'POST with Content-Length', source: 'RFC 9112 §6.2', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 11\r\n\r\nhello world`], judge: servedWithBody('/a', 'hello world') },
  { id: 'post-cl0', group: 'compliance', title: 'POST with Content-Length: 0', source: 'RFC 9112 §6.2', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 0\r\n\r\n`], judge: servedWithBody('/a', '') },
  { id: 'post-chunked', group: 'compliance', title: 'POST chunked', source: 'RFC 9112 §7.1', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`], judge: servedWithBody('/a', 'hello world') },
  { id: 'chunk-ext', group: 'compliance', title: 'chunk extensions are ignored', source: 'RFC 9112 §7.1.1', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n6 ; name="q s"\r\n world\r\n0\r\n\r\n`], judge: servedWithBody('/a', 'hello world') },
  {
    id: 'chunk-trailer', group: 'compliance', title: 'trailer section after the last chunk, then a pipelined GET', source: 'RFC 9112 §7.1.2',
    send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n${get(c, '/b')}`], expect: 2,
    judge: all(served(paths('/a', '/b')), bodyIs('/a', 'hello')),
  },
  { id: 'te-mixed-case', group: 'compliance', title: 'Transfer-Encoding: Chunked (coding names are case-insensitive)', source: 'RFC 9112 §7', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`], judge: servedWithBody('/a', 'hello') },
  { id: 'te-tab-ows', group: 'compliance', title: 'Transfer-Encoding:<HTAB>chunked (OWS may be a tab)', source: 'RFC 9110 §5.6.3', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding:\tchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`], judge: servedWithBody('/a', 'hello') },
  { id: 'cl-lowercase', group: 'compliance', title: 'content-length in lower case', source: 'RFC 9110 §5.1', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nhost: ${c.host}\r\ncontent-length: 5\r\n\r\nhello`], judge: servedWithBody('/a', 'hello') },
  { id: 'cl-leading-zeros', group: 'compliance', title: 'Content-Length: 005 (1*DIGIT)', source: 'RFC 9110 §8.6', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 005\r\n\r\nhello`], judge: servedWithBody('/a', 'hello') },
  { id: 'absolute-form', group: 'compliance', title: 'absolute-form target, sent on in origin-form', source: 'RFC 9112 §3.2.2', send: (c) => [`GET http://${c.host}${c.p}/abs?q=1 HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: one('/abs?q=1') },
  { id: 'absolute-form-host', group: 'compliance', title: 'absolute-form target wins over a different Host', source: 'RFC 9112 §3.2.2 (MUST ignore Host)', send: (c) => [`GET http://${c.host}${c.p}/abs HTTP/1.1\r\nHost: other.invalid\r\n\r\n`], judge: one('/abs') },
  { id: 'pct-target', group: 'compliance', title: 'a percent-encoded target reaches the origin unchanged', source: 'RFC 9112 §3.2, RFC 9110 §7.6', send: (c) => [get(c, '/a%20b/%2F?x=%41&y=1')], judge: one('/a%20b/%2F?x=%41&y=1') },
  { id: 'leading-crlf', group: 'compliance', title: 'an empty line before the request line is ignored', source: 'RFC 9112 §2.2 (SHOULD ignore at least one)', send: (c) => [`\r\n${get(c, '/a')}`], judge: one('/a') },
  {
    id: 'expect-100', group: 'compliance', title: 'Expect: 100-continue, body sent after a pause', source: 'RFC 9110 §10.1.1',
    send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n`, { delayMs: 700, data: 'body' }],
    judge: servedWithBody('/a', 'body'),
  },
  { id: 'head', group: 'compliance', title: 'HEAD: no body, and the pipelined GET after it is answered', source: 'RFC 9110 §9.3.2, RFC 9112 §6.3', send: (c) => [`HEAD ${c.p}/h HTTP/1.1\r\nHost: ${c.host}\r\n\r\n${get(c, '/g')}`], head: [0], expect: 2, judge: served(paths('/h', '/g'), { head: [0] }) },
  {
    id: 'options-star', group: 'compliance', title: 'OPTIONS * is answered (asterisk-form)', source: 'RFC 9112 §3.2.4',
    send: (c) => [`OPTIONS * HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`],
    judge: check((r) => finals(r).length === 1 && finals(r)[0]!.complete && (finals(r)[0]!.status < 500 || finals(r)[0]!.status === 501) && finals(r)[0]!.status !== 400, (r) => `answers: ${finals(r).map((x) => x.status).join(',') || 'none'}`),
  },
  { id: 'unknown-method', group: 'compliance', title: 'an extension method (a valid token) is forwarded, or refused 501/405, not 400', source: 'RFC 9110 §9.1 (unrecognized: 501), §16.1', send: (c) => [`FOO ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: either(one('/a'), refused([501, 405], { close: false })) },
  { id: 'ows-values', group: 'compliance', title: 'OWS around values, an empty value', source: 'RFC 9110 §5.5', send: (c) => [get(c, '/a', 'X-A:   spaced \t\r\nX-Empty:\r\n')], judge: all(one('/a'), atOrigin('/a', (q) => (fields(q.head).find(([n]) => n === 'x-a')?.[1] === 'spaced' ? null : 'x-a not "spaced" at the origin'))) },
  { id: 'obs-text', group: 'compliance', title: 'obs-text (0x80-0xFF) in a value is allowed', source: 'RFC 9110 §5.5', send: (c) => [Buffer.from(get(c, '/a', 'X-A: caf\xe9\r\n'), 'latin1')], judge: one('/a') },
  { id: 'head-6k', group: 'compliance', title: 'a 6 KiB head of 40 fields', source: 'RFC 9112 §5 (no limit below 8 KiB expected)', send: (c) => [get(c, '/a', Array.from({ length: 40 }, (_, i) => `X-F${i}: ${'v'.repeat(140)}\r\n`).join(''))], judge: one('/a') },
  {
    id: 'connection-option', group: 'compliance', title: 'a field named in Connection is removed before forwarding', source: 'RFC 9110 §7.6.1 (MUST)',
    send: (c) => [get(c, '/a', 'Connection: X-Hop\r\nX-Hop: secret\r\n')], judge: all(one('/a'), lacks('/a', 'x-hop')),
  },
  { id: 'upgrade-ignored', group: 'compliance', title: 'Upgrade: h2c is ignored: a plain 200, no 101', source: 'RFC 9110 §7.8 (MAY ignore)', send: (c) => [get(c, '/a', 'Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n')], judge: one('/a') },
  { id: 'body-256k', group: 'compliance', title: 'a 256 KiB body arrives intact', source: 'RFC 9112 §6', send: (c) => [`PUT ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: ${256 * 1024}\r\n\r\n`, 'x'.repeat(256 * 1024)], judge: servedWithBody('/a', 'x'.repeat(256 * 1024)) },

  // ---- smuggling: framing disagreements ----
  {
    id: 'cl-te', group: 'smuggling', title: 'CL.TE: Content-Length 6 and chunked, a request after the last chunk', source: 'RFC 9112 §6.3 (3); PortSwigger CL.TE',
    send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled(c)}`],
    judge: either(mustRefuse([400]), teWins('/s', '')),
  },
  {
    id: 'te-cl', group: 'smuggling', title: 'TE.CL: chunked and Content-Length 3, a request inside the chunk', source: 'RFC 9112 §6.3 (3); PortSwigger TE.CL',
    send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n${chunkOf(smuggled(c))}0\r\n\r\n`],
    judge: either(mustRefuse([400]), teWins('/s', (r) => smuggled(r))),
  },
  {
    id: 'cl-te-http10', group: 'smuggling', title: 'HTTP/1.0 with Transfer-Encoding and Content-Length', source: 'RFC 9112 §6.1 (1.0 + TE: framing faulty, close)',
    send: (c) => [`POST ${c.p}/s HTTP/1.0\r\nHost: ${c.host}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled(c)}`],
    judge: either(mustRefuse([400, 501]), all(closed, notSmuggled(), cleanlyFramed, check((r) => finals(r).length <= 1, 'more than one answer'))),
  },
  { id: 'te-xchunked', group: 'smuggling', title: 'Transfer-Encoding: xchunked (unknown coding)', source: 'RFC 9112 §6.1 (SHOULD 501)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([501, 400]) },
  { id: 'te-quoted', group: 'smuggling', title: 'Transfer-Encoding: "chunked" (quoted: not the chunked coding)', source: 'RFC 9112 §6.1', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: "chunked"\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([501, 400]) },
  { id: 'te-not-last', group: 'smuggling', title: 'Transfer-Encoding: chunked, gzip (chunked not final)', source: 'RFC 9112 §6.3 (MUST 400 and close)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400, 501]) },
  { id: 'te-two-fields', group: 'smuggling', title: 'Transfer-Encoding: chunked and a second Transfer-Encoding: identity', source: 'RFC 9112 §6.3 (combined: chunked not final)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400, 501]) },
  { id: 'te-chunked-twice', group: 'smuggling', title: 'Transfer-Encoding: chunked, chunked', source: 'RFC 9112 §6.1 (chunked at most once)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400, 501]) },
  { id: 'te-space-colon', group: 'smuggling', title: '"Transfer-Encoding : chunked" with Content-Length', source: 'RFC 9112 §5.1 (MUST 400)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'te-tab-colon', group: 'smuggling', title: '"Transfer-Encoding<HTAB>: chunked"', source: 'RFC 9112 §5.1 (MUST 400)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'te-vtab', group: 'smuggling', title: 'Transfer-Encoding:<VT>chunked (VT is not OWS)', source: 'RFC 9110 §5.6.3; HTTP Garden', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5\r\nTransfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400, 501]) },
  {
    id: 'te-obs-fold', group: 'smuggling', title: 'Transfer-Encoding value on an obs-fold line, with Content-Length', source: 'RFC 9112 §5.2; PortSwigger TE obfuscation',
    send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${smuggled(c)}`],
    judge: either(mustRefuse([400, 501]), teWins('/s', '')),
  },
  { id: 'te-http10-only', group: 'smuggling', title: 'HTTP/1.0 with Transfer-Encoding: chunked only', source: 'RFC 9112 §6.1 (faulty framing, close after)', send: (c) => [`POST ${c.p}/s HTTP/1.0\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n${smuggled(c)}`], judge: either(mustRefuse([400, 501]), all(closed, notSmuggled(), cleanlyFramed)) },
  { id: 'cl-dup-same', group: 'smuggling', title: 'two Content-Length: 5', source: 'RFC 9112 §6.3 (5: reject or keep one)', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello`], judge: either(mustRefuse([400]), all(servedWithBody('/a', 'hello'), atOrigin('/a', (q) => (fields(q.head).filter(([n]) => n === 'content-length').length === 1 ? null : 'two Content-Length forwarded')))) },
  { id: 'cl-dup-diff', group: 'smuggling', title: 'Content-Length: 3 and Content-Length: 5', source: 'RFC 9112 §6.3 (5: MUST 400)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabc${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'cl-list-same', group: 'smuggling', title: 'Content-Length: 5, 5', source: 'RFC 9110 §8.6 (MAY keep one)', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5, 5\r\n\r\nhello`], judge: either(mustRefuse([400]), servedWithBody('/a', 'hello')) },
  { id: 'cl-list-diff', group: 'smuggling', title: 'Content-Length: 3, 5', source: 'RFC 9112 §6.3 (5: MUST 400)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 3, 5\r\n\r\nabc${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'cl-plus', group: 'smuggling', title: 'Content-Length: +5', source: 'RFC 9110 §8.6 (1*DIGIT)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: +5\r\n\r\nhello${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'cl-negative', group: 'smuggling', title: 'Content-Length: -1', source: 'RFC 9110 §8.6', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: -1\r\n\r\n${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'cl-hex', group: 'smuggling', title: 'Content-Length: 0x5', source: 'RFC 9110 §8.6', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 0x5\r\n\r\nhello${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'cl-inner-space', group: 'smuggling', title: 'Content-Length: 1 2', source: 'RFC 9110 §8.6', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 1 2\r\n\r\nhello world!${smuggled(c)}`], judge: mustRefuse([400]) },
  { id: 'cl-huge', group: 'smuggling', title: 'Content-Length: 2^64 + 5 (must not wrap)', source: 'RFC 9110 §8.6 (overflow); HTTP Garden', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 18446744073709551621\r\n\r\nhello${smuggled(c)}`], judge: mustRefuse([400, 413]) },
  { id: 'cl-obs-fold', group: 'smuggling', title: 'Content-Length value on an obs-fold line', source: 'RFC 9112 §5.2', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length:\r\n 5\r\n\r\nhello`], judge: either(mustRefuse([400]), servedWithBody('/a', 'hello')) },
  { id: 'get-body-request', group: 'smuggling', title: 'GET with a Content-Length body that is itself a request: it stays a body', source: 'RFC 9110 §9.3.1; PortSwigger CL.0', send: (c) => [`GET ${c.p}/g HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: ${Buffer.byteLength(smuggled(c))}\r\n\r\n${smuggled(c)}`], judge: either(mustRefuse([400]), all(one('/g'), notSmuggled())) },
  { id: 'chunk-size-0x', group: 'smuggling', title: 'chunk size 0x5', source: 'RFC 9112 §7.1 (1*HEXDIG)', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuseBody([400]) },
  { id: 'chunk-size-plus', group: 'smuggling', title: 'chunk size +5', source: 'RFC 9112 §7.1', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuseBody([400]) },
  { id: 'chunk-size-overflow', group: 'smuggling', title: 'chunk size 2^64 + 5 (must not wrap to 5)', source: 'RFC 9112 §7.1 (overflow); HTTP Garden', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuseBody([400, 413]) },
  { id: 'chunk-size-empty', group: 'smuggling', title: 'an empty chunk-size line', source: 'RFC 9112 §7.1', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuseBody([400]) },
  { id: 'chunk-data-long', group: 'smuggling', title: 'chunk data longer than its size', source: 'RFC 9112 §7.1', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n${smuggled(c)}`], judge: mustRefuseBody([400]) },
  { id: 'chunk-no-crlf', group: 'smuggling', title: 'no CRLF after chunk data', source: 'RFC 9112 §7.1', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc0\r\n\r\n${smuggled(c)}`], judge: mustRefuseBody([400]) },
  { id: 'chunk-lf-only', group: 'smuggling', title: 'chunk-size line ended by a bare LF: refused, or read as a line end', source: 'RFC 9112 §2.2, §7.1', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n`], judge: either(mustRefuseBody([400]), servedWithBody('/a', 'hello')) },
  { id: 'chunk-size-space', group: 'smuggling', title: 'chunk size followed by a space, no extension', source: 'RFC 9112 §7.1.1 (BWS only before ";")', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n`], judge: either(mustRefuseBody([400]), servedWithBody('/a', 'hello')) },
  { id: 'chunk-ext-cr', group: 'smuggling', title: 'a bare CR in a chunk extension', source: 'RFC 9112 §2.2 (bare CR invalid); HTTP Garden', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\rb\r\nhello\r\n0\r\n\r\n`], judge: either(mustRefuseBody([400]), servedWithBody('/a', 'hello')) },
  { id: 'chunk-last-lf', group: 'smuggling', title: 'last chunk ended by LF LF, then a request', source: 'RFC 9112 §7.1; HTTP Garden', send: (c) => [`POST ${c.p}/s HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\n\n${smuggled(c)}`], judge: either(mustRefuseBody([400]), all(bodyIs('/s', 'hello'), cleanlyFramed)) },

  // ---- malformed: what must be refused (or repaired, where the RFC allows) ----
  { id: 'lf-head', group: 'malformed', title: 'every line ended by a bare LF', source: 'RFC 9112 §2.2 (MAY accept LF)', send: (c) => [`GET ${c.p}/a HTTP/1.1\nHost: ${c.host}\n\n`], judge: either(mustRefuse([400]), all(one('/a'), headClean('/a'))) },
  { id: 'lf-one-line', group: 'malformed', title: 'one field line ended by a bare LF', source: 'RFC 9112 §2.2 (MAY accept LF)', send: (c) => [`GET ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\nX-A: 1\r\n\r\n`], judge: either(mustRefuse([400]), all(one('/a'), headClean('/a'))) },
  { id: 'cr-in-value', group: 'malformed', title: 'a bare CR inside a value', source: 'RFC 9112 §2.2 (invalid, or replaced by SP)', send: (c) => [get(c, '/a', 'X-A: 1\r2\r\n')], judge: either(mustRefuse([400]), all(one('/a'), headClean('/a'))) },
  { id: 'cr-line-end', group: 'malformed', title: 'request line ended by a bare CR', source: 'RFC 9112 §2.2', send: (c) => [`GET ${c.p}/a HTTP/1.1\rHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400]) },
  { id: 'nul-in-value', group: 'malformed', title: 'NUL in a value', source: 'RFC 9110 §5.5 (reject, or replace with SP)', send: (c) => [get(c, '/a', 'X-A: a\0b\r\n')], judge: either(mustRefuse([400]), all(one('/a'), headClean('/a'))) },
  { id: 'ctl-in-value', group: 'malformed', title: 'a control byte (0x01) in a value', source: 'RFC 9110 §5.5 (invalid; MAY be kept)', send: (c) => [get(c, '/a', 'X-A: a\x01b\r\n')], judge: either(mustRefuse([400]), one('/a')) },
  { id: 'del-in-value', group: 'malformed', title: 'DEL (0x7F) in a value', source: 'RFC 9110 §5.5 (invalid; MAY be kept)', send: (c) => [get(c, '/a', 'X-A: a\x7fb\r\n')], judge: either(mustRefuse([400]), one('/a')) },
  { id: 'nul-request-line', group: 'malformed', title: 'NUL in the request target', source: 'RFC 9112 §3', send: (c) => [`GET ${c.p}/a\0 HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400]) },
  { id: 'obs-fold', group: 'malformed', title: 'obs-fold in a field', source: 'RFC 9112 §5.2 (400, or replace with SP)', send: (c) => [get(c, '/a', 'X-A: 1\r\n folded\r\n')], judge: either(mustRefuse([400]), all(one('/a'), headClean('/a'))) },
  { id: 'ws-first-line', group: 'malformed', title: 'whitespace-led line right after the request line', source: 'RFC 9112 §2.2 (reject, or drop the line)', send: (c) => [`GET ${c.p}/a HTTP/1.1\r\n X-A: 1\r\nHost: ${c.host}\r\n\r\n`], judge: either(mustRefuse([400]), all(one('/a'), lacks('/a', 'x-a'), headClean('/a'))) },
  { id: 'ws-before-colon', group: 'malformed', title: 'whitespace between a field name and the colon', source: 'RFC 9112 §5.1 (MUST 400)', send: (c) => [get(c, '/a', 'X-A : 1\r\n')], judge: mustRefuse([400]) },
  { id: 'name-paren', group: 'malformed', title: 'a field name with "(" (not a token)', source: 'RFC 9110 §5.1; 400 SHOULD, or the line dropped', send: (c) => [get(c, '/a', 'X(A): 1\r\n')], judge: badField('X(A)') },
  { id: 'name-empty', group: 'malformed', title: 'an empty field name', source: 'RFC 9110 §5.1; 400 SHOULD, or the line dropped', send: (c) => [get(c, '/a', ': 1\r\n')], judge: badField('\r\n: 1') },
  { id: 'name-no-colon', group: 'malformed', title: 'a field line without a colon', source: 'RFC 9112 §5; 400 SHOULD, or the line dropped', send: (c) => [get(c, '/a', 'X-A 1\r\n')], judge: badField('X-A 1') },
  { id: 'name-space', group: 'malformed', title: 'a space inside a field name', source: 'RFC 9110 §5.1; 400 SHOULD, or the line dropped', send: (c) => [get(c, '/a', 'X A: 1\r\n')], judge: badField('X A:') },
  { id: 'name-nonascii', group: 'malformed', title: 'a non-ASCII byte in a field name', source: 'RFC 9110 §5.1; 400 SHOULD, or the line dropped', send: (c) => [Buffer.from(get(c, '/a', 'X-\xe9: 1\r\n'), 'latin1')], judge: badField('X-\xe9') },
  { id: 'double-space', group: 'malformed', title: 'two spaces between method and target', source: 'RFC 9112 §3 (400, or MAY parse on whitespace)', send: (c) => [`GET  ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: either(mustRefuse([400]), one('/a')) },
  { id: 'tab-separator', group: 'malformed', title: 'HTAB between the request-line parts', source: 'RFC 9112 §3 (400, or MAY parse on whitespace)', send: (c) => [`GET\t${c.p}/a\tHTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: either(mustRefuse([400]), one('/a')) },
  { id: 'target-space', group: 'malformed', title: 'a space inside the target', source: 'RFC 9112 §3.2 (SHOULD 400 or 301)', send: (c) => [`GET ${c.p}/a b HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400, 301], { close: false }) },
  { id: 'target-nonascii', group: 'malformed', title: 'a raw 0xFF byte in the target', source: 'RFC 9112 §3 (SHOULD 400 or 301)', send: (c) => [Buffer.from(`GET ${c.p}/\xff HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`, 'latin1')], judge: mustRefuse([400, 301], { close: false }) },
  { id: 'target-fragment', group: 'malformed', title: 'a fragment in the target: refused, or not sent on', source: 'RFC 9112 §3.2 (no fragment in origin-form)', send: (c) => [`GET ${c.p}/a#frag HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: either(mustRefuse([400], { close: false }), one('/a')) },
  { id: 'target-relative', group: 'malformed', title: 'a target without a leading slash', source: 'RFC 9112 §3.2', send: (c) => [`GET c/x HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400], { close: false }) },
  { id: 'method-bad-char', group: 'malformed', title: 'a method with "(" (not a token)', source: 'RFC 9110 §9.1', send: (c) => [`G(T ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400]) },
  { id: 'method-lowercase', group: 'malformed', title: '"get": a valid token, not GET (methods are case-sensitive): forwarded, or 501/405', source: 'RFC 9110 §9.1 (unrecognized: 501)', send: (c) => [`get ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: either(one('/a'), refused([501, 405], { close: false })) },
  { id: 'version-lowercase', group: 'malformed', title: 'http/1.1 (HTTP-name is case-sensitive)', source: 'RFC 9112 §2.3', send: (c) => [`GET ${c.p}/a http/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400, 505]) },
  { id: 'version-1.2', group: 'malformed', title: 'HTTP/1.2: served as 1.1 (SHOULD), or 505', source: 'RFC 9110 §2.5 (higher minor: SHOULD serve as highest known)', send: (c) => [`GET ${c.p}/a HTTP/1.2\r\nHost: ${c.host}\r\n\r\n`], judge: either(one('/a'), mustRefuse([505])) },
  { id: 'version-2.0', group: 'malformed', title: 'HTTP/2.0 in an HTTP/1 request line', source: 'RFC 9110 §2.5, §15.6.6 (505)', send: (c) => [`GET ${c.p}/a HTTP/2.0\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([505, 400]) },
  { id: 'version-digits', group: 'malformed', title: 'HTTP/1.10 (one DIGIT each side)', source: 'RFC 9112 §2.3', send: (c) => [`GET ${c.p}/a HTTP/1.10\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400, 505]) },
  { id: 'version-missing', group: 'malformed', title: '"HTTP/" without a version', source: 'RFC 9112 §2.3', send: (c) => [`GET ${c.p}/a HTTP/\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([400, 505]) },
  { id: 'http09', group: 'malformed', title: 'HTTP/0.9 "GET /path": refused or closed, never forwarded', source: 'RFC 9112 §3 (no 0.9 from 1.1 servers); HTTP Garden', send: (c) => [`GET ${c.p}/a\r\n\r\n`], judge: either(mustRefuse([400, 505]), silentlyClosed) },
  { id: 'h2-preface', group: 'malformed', title: 'the HTTP/2 connection preface: refused, or served as h2c (prior knowledge)', source: 'RFC 9113 §3.4', send: () => ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'], judge: either(mustRefuse([400, 505, 501]), silentlyClosed, http2Preface) },
  { id: 'line-16k', group: 'malformed', title: 'a 16 KiB request line', source: 'RFC 9112 §3 (414), RFC 9110 §15.5.15', send: (c) => [`GET ${c.p}/a?${'q'.repeat(16 * 1024)} HTTP/1.1\r\nHost: ${c.host}\r\n\r\n`], judge: mustRefuse([414, 400, 431]) },
  { id: 'head-64k', group: 'malformed', title: 'a 64 KiB head (64 fields of 1 KiB)', source: 'RFC 6585 §5 (431)', send: (c) => [get(c, '/a', Array.from({ length: 64 }, (_, i) => `X-${i}: ${'b'.repeat(1000)}\r\n`).join(''))], judge: mustRefuse([431, 400]) },
  { id: 'field-20k', group: 'malformed', title: 'one 20 KiB field: served, or 431', source: 'RFC 6585 §5 (no limit is set by the RFC)', send: (c) => [get(c, '/a', `X-Big: ${'b'.repeat(20 * 1024)}\r\n`)], judge: either(one('/a'), mustRefuse([431, 400])) },
  { id: 'many-fields', group: 'malformed', title: '500 small fields: served or 431', source: 'RFC 6585 §5', send: (c) => [get(c, '/a', Array.from({ length: 500 }, (_, i) => `X-${i}: v\r\n`).join(''))], judge: either(one('/a'), mustRefuse([431, 400])) },
  { id: 'no-host', group: 'malformed', title: 'HTTP/1.1 without Host', source: 'RFC 9112 §3.2 (MUST 400)', send: (c) => [`GET ${c.p}/a HTTP/1.1\r\n\r\n`], judge: mustRefuse([400], { close: false }) },
  { id: 'two-hosts', group: 'malformed', title: 'two Host fields', source: 'RFC 9112 §3.2 (MUST 400)', send: (c) => [get(c, '/a', `Host: ${c.host}\r\n`)], judge: mustRefuse([400], { close: false }) },
  { id: 'host-invalid', group: 'malformed', title: 'Host: "a b" (invalid value)', source: 'RFC 9112 §3.2 (MUST 400)', send: (c) => [`GET ${c.p}/a HTTP/1.1\r\nHost: a b\r\n\r\n`], judge: mustRefuse([400], { close: false }) },
  { id: 'host-userinfo', group: 'malformed', title: 'Host with userinfo (user@host)', source: 'RFC 9110 §7.2, §4.2.4', send: (c) => [`GET ${c.p}/a HTTP/1.1\r\nHost: user@${c.host}\r\n\r\n`], judge: mustRefuse([400], { close: false }) },

  // ---- connection handling ----
  { id: 'conn-close', group: 'connection', title: 'Connection: close: answered, closed, the pipelined request after it not processed', source: 'RFC 9112 §9.6 (MUST NOT process further)', send: (c) => [get(c, '/a', 'Connection: close\r\n') + get(c, '/after')], judge: all(one('/a', { close: true }), notSmuggled('/after')) },
  { id: 'keepalive-seq', group: 'connection', title: 'two requests in turn on one connection', source: 'RFC 9112 §9.3', send: (c) => [get(c, '/a'), { delayMs: 400, data: get(c, '/b') }], expect: 2, judge: served(paths('/a', '/b'), { close: false }) },
  { id: 'pipeline-10', group: 'connection', title: 'ten pipelined GETs in one write', source: 'RFC 9112 §9.3.2', send: (c) => [Array.from({ length: 10 }, (_, i) => get(c, `/${i}`)).join('')], expect: 10, judge: served(paths(...Array.from({ length: 10 }, (_, i) => `/${i}`)), { close: false }) },
  { id: 'pipeline-post', group: 'connection', title: 'a POST with a body, then a pipelined GET', source: 'RFC 9112 §9.3.2', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 5\r\n\r\nhello${get(c, '/b')}`], expect: 2, judge: all(served(paths('/a', '/b')), bodyIs('/a', 'hello')) },
  {
    id: 'pipeline-bad-second', group: 'connection', title: 'a good request, then a malformed one: 200, then 400 and a close; the bad one never forwarded', source: 'RFC 9112 §2.2, §9.3.2',
    send: (c) => [get(c, '/a') + `GET ${c.p}/b HTTP/1.1\r\nHost: ${c.host}\r\nX-A : 1\r\n\r\n`], expect: 2,
    judge: all(
      check((r) => finals(r)[0]?.status === 200 && finals(r)[0]!.body.toString() === `ok:${r.p}/a`, (r) => `first answer ${finals(r)[0]?.status ?? 'none'}`),
      check((r) => finals(r).length === 2 && finals(r)[1]!.status === 400, (r) => `second answer ${finals(r)[1]?.status ?? 'none'}`),
      closed,
      check((r) => !r.origin.requests.some((q) => q.target.endsWith('/b')) && !r.origin.raw.toString('latin1').includes('/b HTTP'), 'the malformed request reached the origin'),
    ),
  },
  { id: 'http10-then-more', group: 'connection', title: 'HTTP/1.0 without keep-alive, then a pipelined request: only the first answered', source: 'RFC 9112 §9.3', send: (c) => [`GET ${c.p}/a HTTP/1.0\r\nHost: ${c.host}\r\n\r\n${get(c, '/after')}`], judge: all(one('/a', { close: true }), notSmuggled('/after')) },
  { id: 'byte-writes', group: 'connection', title: 'a chunked POST written one byte at a time', source: 'RFC 9112 (framing is independent of reads)', send: (c) => [...`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n`].map((ch) => ({ data: ch, delayMs: 2 })), judge: servedWithBody('/a', 'abc') },
  { id: 'slow-head', group: 'connection', title: 'a head in two writes 500 ms apart', source: 'RFC 9112', send: (c) => [`GET ${c.p}/a HTTP/1.1\r\nHo`, { delayMs: 500, data: `st: ${c.host}\r\n\r\n` }], judge: one('/a') },
  { id: 'half-close', group: 'connection', title: 'a request, then the visitor half-closes: answered, or closed (no hang, no garbage)', source: 'RFC 9112 §9.6', send: (c) => [{ data: get(c, '/a'), end: true }], judge: either(one('/a'), all(closed, check((r) => r.parsed.all.length === 0 && r.parsed.leftover.length === 0, 'garbage'))) },
  { id: 'expect-with-body', group: 'connection', title: 'Expect: 100-continue with the body in the same write', source: 'RFC 9110 §10.1.1', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\nbody${get(c, '/b')}`], expect: 2, judge: all(served(paths('/a', '/b')), bodyIs('/a', 'body')) },
  {
    id: 'expect-no-body', group: 'connection', title: 'Expect: 100-continue, body never sent: 100 (or a final answer) comes, or the head is forwarded', source: 'RFC 9110 §10.1.1 (a proxy MUST answer or forward at once)',
    send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n`], expect: 0,
    judge: check((r) => r.parsed.all.length > 0 || r.origin.raw.toString('latin1').includes(`${r.p}/a`), 'no 100, no answer, nothing forwarded'),
  },
  { id: 'expect-unknown', group: 'connection', title: 'Expect: foo: 417, or served', source: 'RFC 9110 §10.1.1 (MAY 417)', send: (c) => [get(c, '/a', 'Expect: foo\r\n')], judge: either(one('/a'), refused([417], { close: false })) },
  { id: 'only-crlf', group: 'connection', title: 'only empty lines: nothing forwarded, nothing served', source: 'RFC 9112 §2.2', send: () => ['\r\n\r\n\r\n'], expect: 0, judge: all(nothingForwarded, check((r) => !finals(r).some((x) => x.status < 400), 'a success answer to nothing')) },
  {
    id: 'truncated-body', group: 'connection', title: 'a body shorter than its Content-Length: the origin never gets a complete request', source: 'RFC 9112 §6.3 (8: incomplete)',
    send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nContent-Length: 10\r\n\r\nabc`], expect: 0,
    judge: all(check((r) => !r.origin.requests.some((q) => q.target.endsWith('/a')), 'the origin got a complete request'), check((r) => !finals(r).some((x) => x.status === 200), 'answered 200')),
  },
  { id: 'chunked-split', group: 'connection', title: 'a chunked body in three writes', source: 'RFC 9112 §7.1', send: (c) => [`POST ${c.p}/a HTTP/1.1\r\nHost: ${c.host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel`, { delayMs: 200, data: 'lo\r\n6\r\n world\r' }, { delayMs: 200, data: '\n0\r\n\r\n' }], judge: servedWithBody('/a', 'hello world') },

  // ---- response side: what the origin sends that an intermediary must not pass on as is ----
  { id: 'r-103', group: 'response', title: '103 Early Hints, then 200: the final answer intact', source: 'RFC 9110 §15.2', origin: interim('HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n'), send: rWithNext, expect: 2, judge: oddResponse({ valid: true, repaired: okBody }) },
  { id: 'r-100-unasked', group: 'response', title: 'an unsolicited 100 Continue, then 200', source: 'RFC 9110 §15.2.1', origin: interim('HTTP/1.1 100 Continue\r\n\r\n'), send: rWithNext, expect: 2, judge: oddResponse({ valid: true, repaired: okBody }) },
  {
    id: 'r-cl-te', group: 'response', title: 'response with Content-Length 50 and chunked', source: 'RFC 9112 §6.3 (3: remove CL or treat as error)',
    origin: odd('HTTP/1.1 200 OK\r\nContent-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED'),
    send: rWithNext, expect: 2,
    judge: oddResponse({ repaired: (x) => (x.status === 200 && x.body.toString() === 'hello' && !(x.header('content-length').length && x.header('transfer-encoding').length) ? null : `passed on: ${x.status}, CL ${x.header('content-length')}, TE ${x.header('transfer-encoding')}, body ${JSON.stringify(x.body.toString().slice(0, 30))}`) }),
  },
  { id: 'r-body-longer', group: 'response', title: 'response body longer than its Content-Length (an injected response after it)', source: 'RFC 9112 §6.3; response splitting', origin: odd('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({ repaired: (x) => (x.status === 200 && x.body.toString() === 'hello' ? null : `got ${x.status}`) }) },
  { id: 'r-bad-status', group: 'response', title: 'a status line "HTTP/1.1 abc OK"', source: 'RFC 9112 §4 (invalid response: 502)', origin: odd('HTTP/1.1 abc OK\r\nContent-Length: 8\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({ closeOk: true }) },
  { id: 'r-no-status-line', group: 'response', title: 'the origin answers bare bytes, no status line', source: 'RFC 9112 §4 (502)', origin: odd('INJECTED\r\n\r\n'), send: rWithNext, expect: 2, judge: oddResponse({ closeOk: true }) },
  { id: 'r-status-2digit', group: 'response', title: 'a two-digit status "HTTP/1.1 20 OK"', source: 'RFC 9112 §4 (3DIGIT)', origin: odd('HTTP/1.1 20 OK\r\nContent-Length: 8\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({ closeOk: true }) },
  { id: 'r-lf-only', group: 'response', title: 'a response head with bare LF line ends: read as line ends, or 502', source: 'RFC 9112 §2.2 (MAY accept LF)', origin: (q) => (q.target.endsWith('/r') ? { bytes: `HTTP/1.1 200 OK\nContent-Length: ${`ok:${q.target}`.length}\n\nok:${q.target}`, close: true } : null), send: rWithNext, expect: 2, judge: oddResponse({ repaired: okBody }) },
  { id: 'r-obs-fold', group: 'response', title: 'obs-fold in a response field', source: 'RFC 9112 §5.2 (proxy: 502, or replace with SP)', origin: (q) => (q.target.endsWith('/r') ? { bytes: `${okHead(q.target)}X-A: 1\r\n folded\r\n\r\nok:${q.target}`, close: true } : null), send: rWithNext, expect: 2, judge: oddResponse({ repaired: (x, r) => okBody(x, r) ?? (/\r\n[ \t]/.test(x.headText) ? 'the fold was passed on' : null) }) },
  { id: 'r-ws-colon', group: 'response', title: 'whitespace before the colon in a response field', source: 'RFC 9112 §5.1 (a proxy MUST remove it)', origin: (q) => (q.target.endsWith('/r') ? { bytes: `${okHead(q.target)}X-A : 1\r\n\r\nok:${q.target}`, close: true } : null), send: rWithNext, expect: 2, judge: oddResponse({ repaired: (x, r) => okBody(x, r) ?? (/\r\nx-a[ \t]+:/i.test(x.headText) ? 'passed on with the whitespace' : null) }) },
  { id: 'r-nul-field', group: 'response', title: 'NUL in a response field value', source: 'RFC 9110 §5.5 (reject, or replace with SP)', origin: (q) => (q.target.endsWith('/r') ? { bytes: `${okHead(q.target)}X-A: a\0b\r\n\r\nok:${q.target}`, close: true } : null), send: rWithNext, expect: 2, judge: oddResponse({ repaired: (x, r) => okBody(x, r) ?? (x.headText.includes('\0') ? 'NUL passed on' : null) }) },
  { id: 'r-cl-dup-diff', group: 'response', title: 'two different Content-Length in a response', source: 'RFC 9112 §6.3 (5: a proxy MUST send 502)', origin: odd('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 13\r\n\r\nhelloINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({}) },
  { id: 'r-cl-invalid', group: 'response', title: 'Content-Length: abc in a response', source: 'RFC 9112 §6.3 (5: a proxy MUST send 502)', origin: odd('HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({}) },
  { id: 'r-close-delimited', group: 'response', title: 'a response without length, ended by the close', source: 'RFC 9112 §6.3 (8)', origin: (q) => (q.target.endsWith('/r') ? { bytes: `HTTP/1.1 200 OK\r\n\r\nok:${q.target}`, close: true } : null), send: (c) => [get(c, '/r')], judge: oddResponse({ valid: true, repaired: okBody }) },
  { id: 'r-cl-short', group: 'response', title: 'Content-Length 100, 5 bytes, then the origin closes: the visitor must see it cut, not complete', source: 'RFC 9112 §6.3 (8: incomplete), §8', origin: odd('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello'), send: (c) => [get(c, '/r')], judge: oddResponse({ cutOk: true, closeOk: true, repaired: (x) => `a complete ${x.status} of ${x.body.length} B (the truncation hidden)` }) },
  { id: 'r-bad-chunk', group: 'response', title: 'a bad chunk size mid-body', source: 'RFC 9112 §7.1', origin: odd('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nINJECTED\r\n0\r\n\r\n'), send: rWithNext, expect: 2, judge: oddResponse({ cutOk: true, closeOk: true, repaired: (x) => `a complete ${x.status} (the broken body hidden)` }) },
  { id: 'r-204-body', group: 'response', title: '204 with Content-Length and bytes after it', source: 'RFC 9110 §15.3.5, RFC 9112 §6.3 (1)', origin: odd('HTTP/1.1 204 No Content\r\nContent-Length: 8\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({ repaired: (x) => (x.status === 204 && x.body.length === 0 ? null : `got ${x.status}`) }) },
  { id: 'r-304-body', group: 'response', title: '304 with bytes after it', source: 'RFC 9110 §15.4.5, RFC 9112 §6.3 (1)', origin: odd('HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: oddResponse({ repaired: (x) => (x.status === 304 && x.body.length === 0 ? null : `got ${x.status}`) }) },
  { id: 'r-head-body', group: 'response', title: 'a body after the answer to HEAD', source: 'RFC 9110 §9.3.2, RFC 9112 §6.3 (1)', origin: (q) => (q.head.startsWith('HEAD ') ? { bytes: 'HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED', close: true } : null), send: (c) => [`HEAD ${c.p}/r HTTP/1.1\r\nHost: ${c.host}\r\n\r\n${get(c, '/next')}`], head: [0], expect: 2, judge: oddResponse({ repaired: (x) => (x.status === 200 ? null : `got ${x.status}`) }) },
  { id: 'r-101-unasked', group: 'response', title: '101 Switching Protocols to a request that asked for no upgrade', source: 'RFC 9110 §15.2.2 (only after Upgrade)', origin: odd('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED'), send: rWithNext, expect: 2, judge: all(check((r) => !r.parsed.all.some((x) => x.status === 101), '101 passed on'), oddResponse({ closeOk: true })) },
  { id: 'r-te-gzip', group: 'response', title: 'Transfer-Encoding: gzip without chunked: close-delimited', source: 'RFC 9112 §6.3 (4)', origin: (q) => (q.target.endsWith('/r') ? { bytes: `HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok:${q.target}`, close: true } : null), send: (c) => [get(c, '/r')], expect: 0, judge: oddResponse({ repaired: okBody }) },
  {
    id: 'r-connection-option', group: 'response', title: 'a response field named in Connection is removed', source: 'RFC 9110 §7.6.1 (MUST)',
    origin: (q) => (q.target.endsWith('/r') ? { bytes: `${okHead(q.target)}Connection: X-Hop\r\nX-Hop: secret\r\n\r\nok:${q.target}` } : null), send: rWithNext, expect: 2,
    judge: oddResponse({ valid: true, repaired: (x, r) => okBody(x, r) ?? (x.header('x-hop').length ? 'X-Hop passed on' : null) }),
  },
];
