import type { HttpRequest, HttpResponse, us_socket_context_t, WebSocket } from '@trufflesuite/uws-js-unofficial';
import { requireClientAddress } from '../http/uws.js';
import { insideCallbackOf, tlsSockets } from '../http/cork.js';
import { WS_CLOSE, WS_OP, WsDecoder, WsFrameError, encodeClosePayload, encodeWsFrame, parseClosePayload } from '../protocol/ws-frames.js';
import type { HttpHead, ResetCode, ResponseHead } from '../protocol/frames.js';
import { invalidResponseHead, requestHeaders } from '../protocol/http-headers.js';
import { CreditMeter } from '../protocol/flow-control.js';
import { HttpVisitor, type OpenUpstream } from './ingress.js';
import type { Downstream, Upstream } from './stream.js';
import { countHttpAnswer } from './metrics.js';

// WebSocket upgrades of public tunnel traffic.
//
//   visitor ══WS══ uWS (this shard) ─Upstream─▶ tunnel ─▶ client ══raw TCP══ local service
//
// uWS owns the visitor's socket and speaks WebSocket itself (it never hands out raw bytes),
// so the edge re-frames: each visitor message becomes one RFC 6455 client frame in the
// stream, and the local service's server frames coming back are parsed into messages for
// ws.send. From the local service's side the stream is byte-for-byte a WebSocket
// connection (the client relays raw bytes after its 101); messages, their type and close
// codes pass through unchanged. Extensions are not negotiated (uWS would have to inflate
// frames it did not compress), so sec-websocket-extensions is not forwarded.
//
// An upgrade the local service answers with anything but 101 is an ordinary HTTP response.

interface WsData {
  visitor: WsVisitor;
}

/** Visitor bytes buffered in uWS before credit toward the local service is held back. */
const SEND_HIGH_WATER_BYTES = 1024 * 1024;
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/** Frames toward the local service are client frames: masked (protocol/ws-frames.ts). */
function clientFrame(op: number, payload: Uint8Array): Buffer {
  return encodeWsFrame(op, payload, true);
}

class WsVisitor implements Downstream {
  up: Upstream | null = null;
  onDone: (() => void) | null = null;
  private ws: WebSocket<WsData> | null = null;
  private upgraded = false;
  private ended = false;
  /** Local → visitor bytes not yet parsed into a whole frame; the local service is the server. */
  private readonly decoder = new WsDecoder({ maxPayloadBytes: MAX_MESSAGE_BYTES, expectMasked: false });
  private fragments: Buffer[] = [];
  private fragmentOp = 0;
  /** Bytes parsed into visitor messages; accepted once uWS holds no more than SEND_HIGH_WATER_BYTES. */
  private readonly meter = new CreditMeter((n) => this.up?.credit(n));
  /** Until the 101, a plain HTTP visitor answers (problem statuses, non-101 responses). */
  private readonly http: HttpVisitor;

  constructor(
    private readonly res: HttpResponse,
    private readonly key: string,
    private readonly context: us_socket_context_t,
    method: string,
  ) {
    this.http = new HttpVisitor(res, method);
    // Until the 101 the plain visitor decides when the stream is over (a refused upgrade, an
    // abort, a 502): the mesh must forget it then, or its entry outlives the visitor.
    this.http.onDone = () => {
      if (!this.upgraded) this.onDone?.();
    };
  }

  aborted(): void {
    if (!this.upgraded) this.http.aborted();
  }

  response(head: ResponseHead): void {
    // uWS throws on a res that was aborted or answered: a 101 then has nothing to upgrade.
    if (this.upgraded || !this.http.awaitingResponse) return;
    if (head.status !== 101) {
      // Refused upgrade: a plain response; the visitor sends nothing more.
      this.http.response(head);
      this.up?.end();
      return;
    }
    // uWS writes the subprotocol into the 101 as given: a CR/LF there would split the response.
    const invalid = invalidResponseHead(head.status, head.headers);
    if (invalid) return this.http.problem('bad-gateway', `the tunnel's local service sent an invalid response header: ${invalid}`, 'protocol');
    let protocol = '';
    for (let i = 0; i < head.headers.length; i += 2) if (head.headers[i]!.toLowerCase() === 'sec-websocket-protocol') protocol = head.headers[i + 1]!;
    this.upgraded = true;
    countHttpAnswer(101);
    this.res.cork(() => this.res.upgrade<WsData>({ visitor: this }, this.key, protocol, '', this.context));
  }

  opened(ws: WebSocket<WsData>): void {
    this.ws = ws;
    if (this.decoder.bufferedBytes) this.parse();
  }

  data(bytes: Uint8Array): void {
    if (!this.upgraded) return this.http.data(bytes);
    // After the close the visitor reads nothing more: bytes kept here would only grow.
    if (this.ended) return;
    this.decoder.push(Buffer.from(bytes)); // a copy: payloads may be held across data() calls
    this.meter.wrote(bytes.byteLength, false);
    if (this.ws) this.parse();
  }

  /** Server frames from the local service → visitor messages. */
  private parse(): void {
    try {
      while (!this.ended && this.parseOne());
    } catch (err) {
      if (!(err instanceof WsFrameError)) throw err;
      // The local service broke the framing: the visitor's connection fails with its code.
      this.ended = true;
      this.ws?.end(err.closeCode, err.message);
      return;
    }
    this.report();
  }

  private parseOne(): boolean {
    const ws = this.ws!;
    const frame = this.decoder.next();
    if (!frame) return false;
    const { op, fin, payload } = frame;
    if (op === WS_OP.Close) {
      const { code, reason } = parseClosePayload(payload);
      this.ended = true;
      // No status on the wire: the visitor sees a normal close.
      ws.end(code === WS_CLOSE.NoStatus ? WS_CLOSE.Normal : code, reason);
      return false;
    }
    if (op === WS_OP.Ping) {
      this.up?.data(clientFrame(WS_OP.Pong, payload));
      return true;
    }
    if (op === WS_OP.Pong) return true;
    if (op !== WS_OP.Continuation) {
      this.fragmentOp = op;
      this.fragments = [];
    }
    if (fin && this.fragments.length === 0) ws.send(payload, this.fragmentOp === WS_OP.Binary);
    else {
      this.fragments.push(payload);
      if (fin) {
        ws.send(Buffer.concat(this.fragments), this.fragmentOp === WS_OP.Binary);
        this.fragments = [];
      }
    }
    return true;
  }

  private report(): void {
    if (!this.ws || this.ended) return;
    if (this.ws.getBufferedAmount() > SEND_HIGH_WATER_BYTES) return; // drain() reports later
    this.meter.drained();
  }

  drained(): void {
    this.report();
  }

  end(): void {
    if (!this.upgraded) return this.http.end();
    if (this.ended) return;
    this.ended = true;
    this.ws?.end(1000);
  }

  reset(code: ResetCode): void {
    if (!this.upgraded) return this.http.reset(code);
    this.fail();
  }

  credit(bytes: number): void {
    if (!this.upgraded) this.http.credit(bytes);
    // uWS cannot pause a WebSocket's reads; visitor messages are bounded by maxPayloadLength.
  }

  private fail(): void {
    if (this.ended) return;
    this.ended = true;
    this.ws?.close();
  }

  // ---- visitor side (uWS callbacks) ----
  message(message: ArrayBuffer, isBinary: boolean): void {
    this.up?.data(clientFrame(isBinary ? WS_OP.Binary : WS_OP.Text, new Uint8Array(message)));
  }

  closed(code: number, reason: ArrayBuffer): void {
    if (!this.ended) {
      this.ended = true;
      // 1005/1006 are local-only codes (no status / dropped): the local service sees a normal close.
      const onWire = code === WS_CLOSE.NoStatus || code === WS_CLOSE.Abnormal ? WS_CLOSE.Normal : code;
      this.up?.data(clientFrame(WS_OP.Close, encodeClosePayload(onWire, Buffer.from(reason).toString('utf8'))));
    }
    this.up?.end();
    this.onDone?.();
  }
}

/** A WebSocket visitor's callback; on a TLS listener its writes toward the tunnel wait for its end. */
function tlsGuard<T>(ws: object, fn: () => T): T {
  return tlsSockets() ? insideCallbackOf(ws, fn) : fn();
}

/**
 * Registers the catch-all WebSocket route. `tunnelOf` says whether a Host is public tunnel
 * traffic (its id) or not (null: the upgrade is refused with 404, as the API has no WebSockets).
 */
export function installUpgradeRoute(
  app: { ws<T>(pattern: string, behavior: import('@trufflesuite/uws-js-unofficial').WebSocketBehavior<T>): unknown },
  tunnelOf: (host: string) => string | null,
  open: OpenUpstream,
  /** The tunnel's access rules: 'refused' (already answered), or whether to drop Authorization
   *  (it held the tunnel's basic-auth password) (edge/access.ts). */
  admit: (tunnelId: string, res: HttpResponse, req: HttpRequest) => 'refused' | 'drop-authorization' | 'admitted' = () => 'admitted',
): void {
  app.ws<WsData>('/*', {
    maxPayloadLength: MAX_MESSAGE_BYTES,
    idleTimeout: 0,
    sendPingsAutomatically: false,
    maxBackpressure: 64 * 1024 * 1024,
    compression: 0,
    upgrade: (res: HttpResponse, req: HttpRequest, context: us_socket_context_t) => {
      const client = requireClientAddress(res, req);
      if (client === null) return;
      const tunnelId = tunnelOf(req.getHeader('host'));
      // Before the WsVisitor and any Open: a refused upgrade never reaches the tunnel.
      const verdict = tunnelId === null ? 'admitted' : admit(tunnelId, res, req);
      if (verdict === 'refused') return;
      const method = req.getCaseSensitiveMethod();
      const visitor = new WsVisitor(res, req.getHeader('sec-websocket-key'), context, method.toUpperCase());
      res.onAborted(() => insideCallbackOf(res, () => visitor.aborted()));
      if (tunnelId === null) {
        (visitor as unknown as { http: HttpVisitor }).http.problem('not-found', 'no WebSocket endpoint here');
        return;
      }
      const query = req.getQuery();
      const raw: string[] = [];
      req.forEach((k, v) => {
        if (k !== 'sec-websocket-extensions' && !(verdict === 'drop-authorization' && k === 'authorization')) raw.push(k, v);
      });
      const head: HttpHead = {
        kind: 'http',
        method,
        target: query ? `${req.getUrl()}?${query}` : req.getUrl(),
        headers: requestHeaders(raw, client, true),
        upgrade: true,
      };
      const up = insideCallbackOf(res, () => open(tunnelId, head, visitor as unknown as HttpVisitor));
      if (!up) {
        (visitor as unknown as { http: HttpVisitor }).http.problem('not-found', `no tunnel is registered for "${tunnelId}"`);
        return;
      }
      visitor.up = up;
      (visitor as unknown as { http: HttpVisitor }).http.up = up;
    },
    // With TLS, writes toward the tunnel from inside these callbacks wait for their end (src/http/cork.ts).
    // No keepLongSendsWhole here: subscribed, a visitor WebSocket upgraded from the tunnel's
    // 101 was closed by uWS right after its open in about 1 run in 7 of tunnel/cleanup (0 of 20
    // without), cause not found; the long-send loss it would guard against stays open here.
    open: (ws) => tlsGuard(ws, () => ws.getUserData().visitor.opened(ws)),
    message: (ws, message, isBinary) => tlsGuard(ws, () => ws.getUserData().visitor.message(message, isBinary)),
    drain: (ws) => tlsGuard(ws, () => ws.getUserData().visitor.drained()),
    close: (ws, code, reason) => tlsGuard(ws, () => ws.getUserData().visitor.closed(code, reason)),
  });
}
