// What the tunnel client tells an observer (the request inspector, src/client/inspector/) about
// each HTTP exchange it carries to the local service. The client calls these synchronously on
// its hot path, so an observer must return at once, copy what it keeps (the buffers are the
// client's) and never throw; the client also guards every call, so a faulty observer costs a
// capture, never a request.

/** One HTTP exchange, as the local service sees it. */
export interface ExchangeObserver {
  /** A chunk of the visitor's request body (may be called after `response`). */
  requestBody(chunk: Uint8Array): void;
  /** The local service's response head (flat [name, value, …], as relayed to the visitor). */
  response(status: number, headers: readonly string[]): void;
  /** A chunk of the response body. */
  responseBody(chunk: Uint8Array): void;
  /** The exchange completed. */
  end(): void;
  /** The exchange failed (local service unreachable, timed out, reset by either side). */
  fail(reason: string): void;
}

/** Per tunnel: asked once per request; null = not captured. */
export interface TunnelObserver {
  request(head: { method: string; target: string; headers: readonly string[] }): ExchangeObserver | null;
}
