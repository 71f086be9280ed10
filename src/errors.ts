// The one table of error codes: code → HTTP status and fixed title (README "The management API").
export const PROBLEMS = {
  'bad-request': { status: 400, title: 'Bad Request' },
  unauthorized: { status: 401, title: 'Unauthorized' },
  forbidden: { status: 403, title: 'Forbidden' },
  'not-found': { status: 404, title: 'Not Found' },
  'method-not-allowed': { status: 405, title: 'Method Not Allowed' },
  'request-timeout': { status: 408, title: 'Request Timeout' },
  conflict: { status: 409, title: 'Conflict' },
  'payload-too-large': { status: 413, title: 'Payload Too Large' },
  'uri-too-long': { status: 414, title: 'URI Too Long' },
  'unsupported-media-type': { status: 415, title: 'Unsupported Media Type' },
  misdirected: { status: 421, title: 'Misdirected Request' },
  'too-many-requests': { status: 429, title: 'Too Many Requests' },
  'header-too-large': { status: 431, title: 'Request Header Fields Too Large' },
  internal: { status: 500, title: 'Internal Server Error' },
  'not-implemented': { status: 501, title: 'Not Implemented' },
  'bad-gateway': { status: 502, title: 'Bad Gateway' },
  unavailable: { status: 503, title: 'Service Unavailable' },
  'gateway-timeout': { status: 504, title: 'Gateway Timeout' },
  'http-version': { status: 505, title: 'HTTP Version Not Supported' },
} as const;

export type ProblemCode = keyof typeof PROBLEMS;

export interface FieldError {
  field: string;
  message: string;
}

/** A coded error: handlers throw these; the HTTP adapter turns them into problem+json. */
export class ApiError extends Error {
  constructor(
    readonly code: ProblemCode,
    readonly detail: string,
    readonly errors?: FieldError[],
    readonly headers?: Record<string, string>,
  ) {
    super(`${code}: ${detail}`);
  }
}

/** Seconds a caller is told to wait (Retry-After) when a dependency is down for a moment. */
export const RETRY_AFTER_S = 2;

/** 503 with Retry-After: the failure passes (the database is down, the server is draining). */
export function unavailableError(detail: string): ApiError {
  return new ApiError('unavailable', detail, undefined, { 'retry-after': String(RETRY_AFTER_S) });
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: FieldError[];
}

export function problemOf(code: ProblemCode, detail: string, errors?: FieldError[]): Problem {
  const p = PROBLEMS[code];
  const body: Problem = { type: `/problems/${code}`, title: p.title, status: p.status, detail };
  if (errors && errors.length > 0) body.errors = errors;
  return body;
}

/** Errors that cross threads travel as plain {code, detail}. */
export interface CodedError {
  code: string;
  detail: string;
  /** The ApiError's response headers (a rate limit's Retry-After), kept across the thread. */
  headers?: Record<string, string>;
}

export function toCodedError(err: unknown): CodedError {
  if (err instanceof ApiError) return { code: err.code, detail: err.detail, ...(err.headers ? { headers: err.headers } : {}) };
  return { code: 'internal', detail: err instanceof Error ? err.message : String(err) };
}

export function fromCodedError(e: CodedError): ApiError {
  const code = (e.code in PROBLEMS ? e.code : 'internal') as ProblemCode;
  return new ApiError(code, e.detail, undefined, e.headers);
}

export function assertNever(x: never): never {
  throw new Error(`unexpected message: ${JSON.stringify(x)}`);
}
