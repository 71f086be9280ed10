import { describeLocalError } from './local-error.js';

// What the tunnel client tells an observer (the request inspector, src/client/inspector/) about
// each HTTP exchange it carries to the local service. The client calls these synchronously on
// its hot path, so an observer must return at once, copy the body bytes it keeps (the buffers are
// the client's; a head's header array is handed over, never changed after) and never throw; the
// client also guards every call, so a faulty observer costs a capture, never a request.

/** One HTTP exchange, as the local service sees it. */
export interface ExchangeObserver {
  /** A chunk of the visitor's request body (may be called after `response`). */
  requestBody(chunk: Uint8Array): void;
  /** The local service's response head (flat [name, value, …], as relayed to the visitor). */
  response(status: number, headers: readonly string[], line?: StatusLine): void;
  /** A chunk of the response body. */
  responseBody(chunk: Uint8Array): void;
  /** The response's trailers (an HTTP/2 local service's: gRPC's grpc-status), before `end`. */
  trailers?(fields: readonly string[]): void;
  /** The exchange completed. */
  end(): void;
  /**
   * The exchange failed (local service unreachable, timed out, reset by either side): why, in
   * words, and the status the edge answered the visitor with in its place (502, 504; null when
   * the visitor got none, or part of the local service's own answer).
   */
  fail(reason: string, visitorStatus?: number | null): void;
}

/** The rest of the status line, as the local service wrote it. */
export interface StatusLine {
  version: 'HTTP/1.0' | 'HTTP/1.1' | 'HTTP/2';
  /** The reason phrase ("OK", or whatever the service chose; may be empty). */
  reason: string;
}

/** Per tunnel: asked once per request; null = not captured. */
export interface TunnelObserver {
  /** `raw`, when present, is the head as bytes and `headers` is empty (src/protocol/raw-head.ts). */
  request(head: ObservedHead): ExchangeObserver | null;
}

/** A request head as the observer gets it. */
export interface ObservedHead {
  method: string;
  target: string;
  headers: readonly string[];
  raw?: Uint8Array;
  /** The visitor's request came as an HTTP/2 stream ('grpc': a gRPC call), as the edge says (HttpHead.protocol); absent: HTTP/1.x. */
  protocol?: 'h2' | 'grpc';
}

/** What the edge answers the visitor in place of the local service's answer, per reset code. */
const VISITOR_STATUS: Record<string, number> = { 'local-unreachable': 502, 'local-invalid': 502, 'local-timeout': 504 };

/** System errors that mean no connection was made at all (as opposed to one that broke), in words. */
const NOT_CONNECTED: Record<string, string> = {
  ECONNREFUSED: 'refused',
  ENOTFOUND: 'host name not found',
  EAI_AGAIN: 'host name not found',
  EHOSTUNREACH: 'unreachable',
  ENETUNREACH: 'unreachable',
  ETIMEDOUT: 'timed out',
  UND_ERR_CONNECT_TIMEOUT: 'timed out',
};

function codeOf(err: Error): string | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** Why no answer came from the local service, when a connection (or none) is what failed. */
function unreachableInWords(local: string, err: Error | null | undefined): string {
  const code = err ? codeOf(err) : undefined;
  if (!err) return `no connection to ${local}`;
  if (code === 'ECONNRESET' || code === 'EPIPE') return 'the local service reset the connection';
  if (code && NOT_CONNECTED[code]) return `no connection to ${local}: ${NOT_CONNECTED[code]}`;
  // No code: the client's own words ("the local service closed the connection without an answer").
  return code ? describeLocalError(err, local) : err.message;
}

/**
 * A reset code (src/protocol/frames.ts ResetCode), or the client's own reasons, in words; `err`
 * is the local service's error when the client knows it. "No connection" only when none was
 * made: a connection the local service reset or closed is said as such.
 */
function reasonInWords(reason: string, local: string, err: Error | null | undefined): string {
  const status = VISITOR_STATUS[reason];
  const got = status ? ` (the visitor got ${status})` : '';
  switch (reason) {
    case 'local-unreachable':
      return `${unreachableInWords(local, err)}${got}`;
    case 'local-invalid':
      return `${local} sent something that is not an HTTP/1.x response${got}`;
    case 'local-timeout':
      return `${local} sent no response in time${got}`;
    case 'visitor-gone':
      return 'the visitor went away';
    case 'closing':
      return 'the connection closed before the exchange ended';
    case 'connection-lost':
      return 'the tunnel connection to the server was lost';
    default:
      return `reset (${reason})`;
  }
}

/** The observer as the tunnel client calls it: failures as reset codes and the local error. */
export interface GuardedObserver extends Omit<ExchangeObserver, 'fail'> {
  /** `reason`: a reset code; `err`: the local service's error, when known. */
  fail(reason: string, err?: Error | null): void;
}

/**
 * What the tunnel client holds per exchange: the observer's calls, each guarded, so an observer
 * that throws loses its capture and nothing else; null when the observer declines. `local` (the
 * tunnel's local service) is put in words only when an exchange fails.
 */
export function guardedExchange(observer: TunnelObserver, head: ObservedHead, local: { host: string; port: number }): GuardedObserver | null {
  let inner: ExchangeObserver | null;
  try {
    inner = observer.request(head);
  } catch {
    return null;
  }
  return inner ? new GuardedExchange(inner, local) : null;
}

/** A class, not closures: one object per exchange on the client's hot path. */
class GuardedExchange implements GuardedObserver {
  private broken = false;

  constructor(
    private readonly inner: ExchangeObserver,
    private readonly local: { host: string; port: number },
  ) {}

  requestBody(chunk: Uint8Array): void {
    if (this.broken) return;
    try {
      this.inner.requestBody(chunk);
    } catch {
      this.broken = true;
    }
  }

  response(status: number, headers: readonly string[], line?: StatusLine): void {
    if (this.broken) return;
    try {
      this.inner.response(status, headers, line);
    } catch {
      this.broken = true;
    }
  }

  responseBody(chunk: Uint8Array): void {
    if (this.broken) return;
    try {
      this.inner.responseBody(chunk);
    } catch {
      this.broken = true;
    }
  }

  trailers(fields: readonly string[]): void {
    if (this.broken) return;
    try {
      this.inner.trailers?.(fields);
    } catch {
      this.broken = true;
    }
  }

  end(): void {
    if (this.broken) return;
    try {
      this.inner.end();
    } catch {
      this.broken = true;
    }
  }

  fail(reason: string, err?: Error | null): void {
    if (this.broken) return;
    try {
      this.inner.fail(reasonInWords(reason, `${this.local.host}:${this.local.port}`, err), VISITOR_STATUS[reason] ?? null);
    } catch {
      this.broken = true;
    }
  }
}
