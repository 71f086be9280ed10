import { STATUS_CODES } from 'node:http';
import { problemOf, type ApiError, type ProblemCode } from '../errors.js';
import { problemPage } from './problem-page.js';

// The one renderer of problem answers (RFC 9457), whichever server writes them: the API's uWS
// routes (http/uws.ts) and the public front (edge/visitor-response.ts).

export interface Reply {
  status: number;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

/** The status line for any status (a tunnel's local service may answer with any). */
export function statusLine(status: number): string {
  return `${status} ${STATUS_CODES[status] ?? 'Status'}`;
}

export function problemReply(code: ProblemCode, detail: string, extra?: Pick<ApiError, 'errors' | 'headers'>): Reply {
  const body = problemOf(code, detail, extra?.errors);
  return {
    status: body.status,
    headers: { 'content-type': 'application/problem+json', ...extra?.headers },
    body: JSON.stringify(body),
  };
}

/**
 * problem+json, or for `html` (public tunnel traffic whose visitor prefers text/html, see
 * problem-page.ts) the same problem as a small HTML page; the API always answers JSON.
 * `status` overrides the code's own only where a handshake maps codes itself.
 */
export function renderProblem(code: ProblemCode, detail: string, opts: { extra?: Pick<ApiError, 'errors' | 'headers'>; status?: number; html?: boolean } = {}): Reply {
  const reply = problemReply(code, detail, opts.extra);
  if (opts.html) {
    const problem = problemOf(code, detail);
    reply.headers = { ...reply.headers, 'content-type': 'text/html; charset=utf-8' };
    reply.body = problemPage(opts.status ? { ...problem, status: opts.status } : problem);
  }
  if (opts.status) reply.status = opts.status;
  return reply;
}
