// What a judge sees of one case, and the verdicts the cases are built from. Every helper
// returns a Verdict with the reason it failed, so the report can say what a subject did.
import type { OriginRecord, OriginRequest } from './origin.js';
import type { Parsed, VisitorResult } from './visitor.js';

export interface Run {
  visitor: VisitorResult;
  parsed: Parsed;
  origin: OriginRecord;
  /** The case's own prefix on the origin: `/c/<id>`. */
  p: string;
  /** The Host the visitor sent. */
  host: string;
}

export interface Verdict {
  ok: boolean;
  why: string;
}

export type Judge = (r: Run) => Verdict;

const pass: Verdict = { ok: true, why: '' };
const no = (why: string): Verdict => ({ ok: false, why });

/** One line: what the subject did (statuses, close, what reached the origin). */
export function describe(r: Run): string {
  const st = r.parsed.all.map((x) => `${x.status}${x.complete ? '' : '(partial)'}`).join(',') || 'no response';
  const conn = r.visitor.closed ? 'closed' : r.visitor.timedOut ? 'open (deadline)' : 'open';
  const left = r.parsed.leftover.length ? `, ${r.parsed.leftover.length} B unparsed: ${JSON.stringify(r.parsed.leftover.toString('latin1').slice(0, 40))}` : '';
  const fwd = r.origin.raw.length === 0 ? 'nothing forwarded' : `forwarded ${r.origin.raw.length} B, ${r.origin.requests.length} req (${r.origin.requests.map((q) => q.target).join(' ')})${r.origin.garbage.length ? `, origin could not frame: ${r.origin.garbage.join('; ')}` : ''}`;
  return `${st}; ${conn}${left}; ${fwd}`;
}

/** All of them must hold; the first failure explains. */
export function all(...js: Judge[]): Judge {
  return (r) => {
    for (const j of js) {
      const v = j(r);
      if (!v.ok) return v;
    }
    return pass;
  };
}

/** Any one of them may hold (the RFC allows each). */
export function either(...js: Judge[]): Judge {
  return (r) => {
    const whys: string[] = [];
    for (const j of js) {
      const v = j(r);
      if (v.ok) return v;
      whys.push(v.why);
    }
    return no(whys.join(' | '));
  };
}

/** Nothing of the case reached the origin. */
export const nothingForwarded: Judge = (r) => (r.origin.raw.length === 0 ? pass : no(`${r.origin.raw.length} B reached the origin`));

/** No request whose target carries `marker` reached the origin as a request (a smuggled one). */
export function notSmuggled(marker = 'smuggled'): Judge {
  return (r) => {
    const hit = r.origin.requests.find((q) => q.target.includes(marker));
    if (hit) return no(`smuggled request reached the origin: ${hit.head.split('\r\n')[0]}`);
    // also as raw text at a line start, in case the origin could not frame it
    const text = r.origin.raw.toString('latin1');
    const framedBodies = r.origin.requests.map((q) => q.rawBody.toString('latin1')).join('');
    if (new RegExp(`(^|\\n)[A-Z]+ [^ ]*${marker}`).test(text) && !framedBodies.includes(marker)) return no(`smuggled request line reached the origin unframed`);
    return pass;
  };
}

/** The origin could frame everything it got (the subject forwarded a well-framed stream). */
export const cleanlyFramed: Judge = (r) => (r.origin.garbage.length === 0 ? pass : no(`origin could not frame: ${r.origin.garbage.join('; ')}`));

/**
 * A refusal: exactly one final response with one of `statuses`, nothing after it, and
 * (with `close`, the default) the connection closed; nothing reached the origin.
 */
export function refused(statuses: number[], opts: { close?: boolean } = {}): Judge {
  const close = opts.close ?? true;
  return (r) => {
    const f = r.parsed.finals;
    if (f.length === 0) return no(r.visitor.closed ? 'closed without a response' : 'no response');
    if (!statuses.includes(f[0]!.status)) return no(`status ${f[0]!.status}, want ${statuses.join('/')}`);
    if (f.length > 1) return no(`${f.length} responses, want the refusal only`);
    if (close && !r.visitor.closed) return no('the connection stayed open after the refusal');
    return nothingForwarded(r);
  };
}

/** Like `refused`, but bytes may have reached the origin (the judge checks what). */
export function refusedHeadOnly(statuses: number[]): Judge {
  return (r) => refused(statuses)({ ...r, origin: { raw: Buffer.alloc(0), requests: [], garbage: [] } });
}

/** Closed with no response at all, nothing forwarded (a refusal without words). */
export const silentlyClosed: Judge = (r) => {
  if (r.parsed.all.length > 0 || r.parsed.leftover.length > 0) return no('answered');
  if (!r.visitor.closed) return no('not closed');
  return nothingForwarded(r);
};

/**
 * Served as HTTP/2 with prior knowledge (h2c): the answer opens with the server's connection
 * preface, a SETTINGS frame on stream 0 (RFC 9113 §3.4), and nothing reached the origin.
 */
export const http2Preface: Judge = (r) => {
  const b = r.visitor.raw;
  if (b.length < 9 || b[3] !== 0x04 || (b.readUInt32BE(5) & 0x7fffffff) !== 0) return no('not an HTTP/2 SETTINGS frame');
  return nothingForwarded(r);
};

/**
 * Served: `count` final responses, all 200 with the origin's body for the expected targets
 * in order (`ok:<target>`), each forwarded once, well framed, nothing smuggled.
 */
export function served(targets: (p: string) => string[], opts: { close?: boolean; head?: number[] } = {}): Judge {
  return (r) => {
    const want = targets(r.p);
    const f = r.parsed.finals;
    if (f.length < want.length) return no(`${f.length} of ${want.length} responses`);
    for (let i = 0; i < want.length; i++) {
      const x = f[i]!;
      if (x.status !== 200) return no(`response ${i + 1}: status ${x.status}`);
      if (!x.complete) return no(`response ${i + 1}: incomplete`);
      if (!(opts.head ?? []).includes(i) && x.body.toString('latin1') !== `ok:${want[i]}`) return no(`response ${i + 1}: body ${JSON.stringify(x.body.toString('latin1').slice(0, 60))}, want "ok:${want[i]}"`);
    }
    if (f.length > want.length) return no(`${f.length} responses, want ${want.length}`);
    if (r.parsed.leftover.length) return no(`${r.parsed.leftover.length} B after the last response`);
    const got = r.origin.requests.map((q) => q.target);
    for (const t of want) if (got.filter((g) => g === t).length !== 1) return no(`origin got ${t} ${got.filter((g) => g === t).length} times`);
    if (opts.close === true && !r.visitor.closed) return no('the connection stayed open (it must close)');
    if (opts.close === false && r.visitor.closed) return no('the connection closed (it should persist)');
    return all(cleanlyFramed, notSmuggled())(r);
  };
}

/** The one request the origin got for `target` (by suffix after the case prefix). */
export function originReq(r: Run, suffix: string): OriginRequest | undefined {
  return r.origin.requests.find((q) => q.target === `${r.p}${suffix}`);
}

/** A check on the origin's view of request `suffix`. */
export function atOrigin(suffix: string, check: (q: OriginRequest) => string | null): Judge {
  return (r) => {
    const q = originReq(r, suffix);
    if (!q) return no(`origin never got ${suffix}`);
    const why = check(q);
    return why === null ? pass : no(why);
  };
}

/** The connection closed (after whatever was answered). */
export const closed: Judge = (r) => (r.visitor.closed ? pass : no('the connection stayed open'));

/** A custom predicate with its failure text. */
export function check(pred: (r: Run) => boolean, why: string | ((r: Run) => string)): Judge {
  return (r) => (pred(r) ? pass : no(typeof why === 'string' ? why : why(r)));
}

/** Fields of a head (lower-cased names) as [name, value] pairs. */
export function fields(head: string): [string, string][] {
  return head
    .split('\r\n')
    .slice(1)
    .filter((l) => l !== '')
    .map((l): [string, string] => {
      const c = l.indexOf(':');
      return [l.slice(0, c).toLowerCase(), l.slice(c + 1).trim()];
    });
}

/** No final response the visitor got is one the origin never sent (a desync shows as one). */
export const noForeignResponse: Judge = (r) => {
  const bad = r.parsed.finals.find((x) => x.status === 200 && x.body.toString('latin1').includes('INJECTED'));
  if (bad) return no('the visitor got the injected response/body');
  if (r.parsed.leftover.toString('latin1').includes('INJECTED')) return no('injected bytes reached the visitor');
  return pass;
};
