import type net from 'node:net';
import type { Logger } from '../log.js';
import { F } from '../protocol/frames.js';
import type { ControlConnection } from './control.js';
import type { TunnelActor } from './tunnel.js';

// The tunnel side of a shard's shutdown (the `drain` message):
//
//   TCP listeners close ─▶ GoAway{timeoutMs} to every client ─▶ every DRAIN_POLL_MS: a control
//   connection whose tunnels have no stream left closes ─▶ until none is left and no visitor is
//   in flight, or the timeout ─▶ whatever is left is cut (its tunnels closed and reported)

/** How often a drain looks for control connections whose streams all ended. */
export const DRAIN_POLL_MS = 50;

export interface DrainScope {
  log: Logger;
  connections: Set<ControlConnection>;
  tcpListeners: Iterable<net.Server>;
  /** visitor requests in flight on this shard (VisitorLimit) */
  visitors: { readonly inflight: number };
  /** this shard's tunnels, at the moment of the call */
  tunnels(): Iterable<TunnelActor>;
  /** Closes this shard's tunnel `id` and reports it (tunnel-down). */
  closeLocal(id: string, reason: string, permanent: boolean): boolean;
}

/** Resolves once every control connection of the scope is closed (heartbeats go on meanwhile). */
export async function drainTunnels(scope: DrainScope, timeoutMs: number): Promise<void> {
  const { connections, visitors } = scope;
  for (const tcp of scope.tcpListeners) tcp.close();
  for (const c of connections) c.send([F.GoAway, { timeoutMs }]);
  const until = Date.now() + timeoutMs;
  const idle = (c: ControlConnection): boolean => [...c.tunnels.values()].every((t) => t.streams.size === 0);
  const closeConnection = (c: ControlConnection): void => {
    for (const t of [...c.tunnels.values()]) scope.closeLocal(t.id, 'the server is shutting down', false);
    c.goAway();
    connections.delete(c);
  };
  // Heartbeats go on meanwhile: a long request must not look like a dead connection.
  for (;;) {
    for (const c of [...connections]) if (idle(c)) closeConnection(c);
    if ((connections.size === 0 && visitors.inflight === 0) || Date.now() >= until) break;
    await new Promise((r) => setTimeout(r, DRAIN_POLL_MS));
  }
  if (connections.size > 0 || visitors.inflight > 0) scope.log.warn({ connections: connections.size, visitors: visitors.inflight }, 'shutdown timeout: cutting open tunnel streams');
  for (const t of [...scope.tunnels()]) scope.closeLocal(t.id, 'the server is shutting down', false);
  for (const c of [...connections]) closeConnection(c);
}
