import type { Probed } from '../lib/probes.js';

// A target is one way of reaching the local origin: straight (direct), through burrow,
// through `ssh -R`, or through a plain Node reverse proxy (node-proxy). Scenarios only see
// this interface, so every measurement runs the same load tool with the same arguments
// against each target in turn.

// `burrow1` is burrowd with one shard (`--workers 1`), measured beside `burrow` (the default
// shard count, or --workers) when asked for: the check that a second shard never makes a row slower.
// `burrow-mesh` is `burrow` with a client that opens no lanes (`burrow http --no-lanes`): the
// visitors who reach another shard than the tunnel's cross threads on the server instead (the
// mesh), measured beside `burrow` to show whether lanes pay for their extra connections.
// `node-proxy` is the floor: a plain node:http reverse proxy (node-proxy.ts), HTTP only.
// `relay` is the floor under a Node *tunnel*: a bare edge and client joined by one TCP
// connection with 9-byte frames (relay.ts), HTTP only.
export type TargetName = 'direct' | 'burrow' | 'burrow1' | 'burrow-mesh' | 'relay' | 'node-proxy' | 'ssh';
export const TARGET_NAMES: readonly TargetName[] = ['direct', 'burrow', 'burrow1', 'burrow-mesh', 'relay', 'node-proxy', 'ssh'];
/**
 * What a run measures unless --targets says otherwise; a scenario that cannot measure an
 * HTTP-only target (tcp, idle, churn) leaves it out.
 */
export const DEFAULT_TARGETS: readonly TargetName[] = ['direct', 'burrow', 'relay', 'node-proxy', 'ssh'];
/** Targets that only proxy HTTP requests: no TCP forwarding, no idle tunnels (Scenario.httpOnlyTargets). */
export const HTTP_ONLY_TARGETS: readonly TargetName[] = ['relay', 'node-proxy'];

/**
 * Where the load tool connects: 127.0.0.1:port, with a Host header for burrow's HTTP routing,
 * over TLS (https://) when `tls`.
 */
export interface Endpoint {
  port: number;
  hostHeader?: string;
  tls?: boolean;
}

export interface Target {
  name: TargetName;
  /** One line for the results: what exactly ran (flags, ciphers, worker count). */
  describe: string;
  /**
   * The target itself serves visitors HTTPS (burrowd with --tls-cert): for HTTPS it forwards
   * to the plain origin. Targets without it carry the bytes, so TLS goes end to end to the
   * origin's TLS listener.
   */
  terminatesTls?: boolean;
  /** Opens a tunnel (or not, for direct) to a local HTTP or TCP service. */
  expose(kind: 'http' | 'tcp', originPort: number): Promise<Endpoint>;
  /**
   * Opens `count` idle HTTP tunnels to originPort (kept until closeTunnels()), the way a user
   * with that many tunnels would: burrow one client connection per tunnel (as many `burrow http`
   * would), ssh one connection carrying `count` -R forwards (one ssh per tunnel would cost a
   * process pair each). Absent for direct, which has no tunnel.
   */
  openIdleTunnels?(originPort: number, count: number): Promise<void>;
  /** Throws if idle tunnels opened above have dropped since (figures would be wrong). */
  checkIdleTunnels?(): void;
  /** Processes whose memory is "the server side" (burrowd; sshd and its session children; node-proxy). */
  serverPids(): number[];
  /** Processes of the tunnel clients (burrow CLI; ssh); none for direct and node-proxy. */
  clientPids(): number[];
  /**
   * Node targets: their processes as started under the probes (lib/probes.ts: --trace-gc,
   * perf stat, perf record), server and client side, for the system calls and GC of a run.
   */
  probes?(): { server: Probed[]; client: Probed[] };
  /** Closes every tunnel opened by expose(), keeping the server up. */
  closeTunnels(): Promise<void>;
  close(): Promise<void>;
}

/** A target that could not be started: the reason goes into the table instead of figures. */
export class Unavailable extends Error {
  constructor(
    readonly target: TargetName,
    reason: string,
  ) {
    super(reason);
  }
}
