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
  /** The exchange failed (local service unreachable, timed out, reset by either side). */
  fail(reason: string): void;
}

/** The rest of the status line, as the local service wrote it. */
export interface StatusLine {
  version: 'HTTP/1.0' | 'HTTP/1.1' | 'HTTP/2';
  /** The reason phrase ("OK", or whatever the service chose; may be empty). */
  reason: string;
}

/** Per tunnel: asked once per request; null = not captured. */
export interface TunnelObserver {
  request(head: { method: string; target: string; headers: readonly string[] }): ExchangeObserver | null;
}

/** A reset code (src/protocol/frames.ts ResetCode), or the client's own reasons, in words. */
function reasonInWords(reason: string, local: string): string {
  switch (reason) {
    case 'local-unreachable':
      return `no connection to ${local} (the visitor got 502)`;
    case 'local-invalid':
      return `${local} sent something that is not an HTTP/1.x response (the visitor got 502)`;
    case 'local-timeout':
      return `${local} sent no response in time (the visitor got 504)`;
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

/**
 * What the tunnel client holds per exchange: the observer's calls, each guarded, so an observer
 * that throws loses its capture and nothing else; null when the observer declines. `local` (the
 * tunnel's local service) is put in words only when an exchange fails.
 */
export function guardedExchange(observer: TunnelObserver, head: { method: string; target: string; headers: readonly string[] }, local: { host: string; port: number }): ExchangeObserver | null {
  let inner: ExchangeObserver | null;
  try {
    inner = observer.request(head);
  } catch {
    return null;
  }
  return inner ? new GuardedExchange(inner, local) : null;
}

/** A class, not closures: one object per exchange on the client's hot path. */
class GuardedExchange implements ExchangeObserver {
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

  fail(reason: string): void {
    if (this.broken) return;
    try {
      this.inner.fail(reasonInWords(reason, `${this.local.host}:${this.local.port}`));
    } catch {
      this.broken = true;
    }
  }
}
