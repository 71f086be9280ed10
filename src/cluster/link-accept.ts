import { WsConnection, websocketAccept } from '../protocol/ws-connection.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import { headerOf, type Exchange, type FrontConnection } from '../edge/front-connection.js';
import type { VisitorResponse } from '../edge/visitor-response.js';
import type { ClusterLinks } from '../edge/shard-context.js';
import { LINK_PATH, type LinkTokens } from './node-links.js';

// The accepting end of a link from another node (src/cluster/node-links.ts): a WebSocket on
// the public port at /cluster/v1/link, whose Authorization must carry one of the cluster's link tokens
// of the time windows accepted now (LinkTokens, compared in constant time). Without --node-url the path does not exist (the API's 404).

const MAX_LINK_MESSAGE_BYTES = 8 * 1024 * 1024;

export function isLinkRequest(head: RequestHead): boolean {
  if (!head.upgrade) return false;
  const q = head.target.indexOf('?');
  return (q < 0 ? head.target : head.target.slice(0, q)) === LINK_PATH;
}

export function acceptLink(links: ClusterLinks, tokens: LinkTokens, conn: FrontConnection, head: RequestHead, res: VisitorResponse): Exchange {
  return {
    requestBody() {},
    requestEnd() {},
    abort() {},
    upgraded(rest: Buffer) {
      conn.detach();
      const key = headerOf(head.headers, 'sec-websocket-key') ?? '';
      const refuse = (status: 'bad-request' | 'unauthorized', detail: string): void => {
        res.closeAfter();
        res.problem(status, detail);
      };
      if (head.method !== 'GET' || (headerOf(head.headers, 'upgrade') ?? '').toLowerCase() !== 'websocket' || headerOf(head.headers, 'sec-websocket-version') !== '13') {
        return refuse('bad-request', 'a cluster link is a WebSocket (version 13): GET with Upgrade: websocket');
      }
      if (!/^[A-Za-z0-9+/]{22}==$/.test(key)) return refuse('bad-request', 'Sec-WebSocket-Key must be 16 bytes in base64');
      if (!tokens.authorized(headerOf(head.headers, 'authorization') ?? undefined)) return refuse('unauthorized', 'not a node of this cluster');
      conn.release();
      const socket = conn.socket;
      socket.setNoDelay(true);
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${websocketAccept(key)}\r\n\r\n`);
      links.accept(new WsConnection(socket, rest, MAX_LINK_MESSAGE_BYTES, 'server'));
      socket.resume();
    },
  };
}
