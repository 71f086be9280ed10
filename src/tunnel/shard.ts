import type { MessagePort } from 'node:worker_threads';
import type { ShardContext } from '../workers/shard-context.js';
import type { HostDispatch } from '../http/uws.js';
import type { TunnelMainToShard } from '../protocol/tunnel-messages.js';
import { assertNever } from '../errors.js';

/** What the shard worker calls into the tunnel data plane. */
export interface ShardTunnels {
  /** Claims public traffic for <id>.<domain> before API routing. */
  dispatch: HostDispatch;
  onMain(msg: TunnelMainToShard): unknown;
  /** A MessagePort to another shard (the mesh); re-sent when that shard restarts. */
  onPeer(shard: number, port: MessagePort): void;
  /** Close every tunnel and control connection (shutdown). */
  drain(): Promise<void>;
}

export function installTunnels(ctx: ShardContext): ShardTunnels {
  const suffix = `.${ctx.config.domain}`;
  return {
    dispatch: (_res, req) => {
      const host = req.getHeader('host').replace(/:\d+$/, '').toLowerCase();
      return host.endsWith(suffix) && host.length > suffix.length && false;
    },
    onMain(msg) {
      switch (msg.type) {
        case 'tunnel-close':
          return {};
        default:
          return assertNever(msg.type);
      }
    },
    onPeer() {},
    async drain() {},
  };
}
