import { decode, encode } from './codec.js';
import { rawHeadProblem, requestHeadLength, sendsChunked, writeRequestHead } from './raw-head.js';
import { MAX_BASIC_AUTH, MAX_CIDRS, basicAuthProblem, parseCidr, type AccessRules } from './access.js';

// The tunnel wire protocol: frames on the control WebSocket (`GET /tunnel/v1/connect`).
//
//   burrow client                              burrowd shard
//   ── Hello {v} ─────────────────────────────▶            (first frame, version check)
//   ◀──────────────────────────────── Welcome {v}          (or Fatal + close)
//   ── Open reqId {type,id?,teamId?,...} ────▶             (any number of tunnels per connection)
//   ◀─────────────── Opened reqId {id,url,remotePort}      (or Refused reqId {code,message,permanent,retryAfterMs?})
//   ── Open reqId {type:'http',id,lane} ──────▶             (on another shard's connection: a lane, below)
//   ◀── StreamOpen sid tunnelId head                       (a visitor request / TCP connection)
//   ◀─▶ Data sid bytes / End sid / Reset sid / Credit sid n (both ways)
//   ◀─▶ Ping n / Pong n                                     (heartbeats, both ways)
//   ◀── Closed tunnelId {code,reason,permanent}            (deleted by an admin, taken over, ...)
//   ◀── GoAway {timeoutMs}                                  (shutdown: open streams finish, then close)
//   ◀── Ticket {resume}                                     (a fresh resumption ticket, to clients that asked)
//
// Every WebSocket message is exactly one frame: a msgpack array whose first element is the
// frame type. Arrays (not maps) keep the hot Data frame at 3 bytes of overhead plus the
// bin header, and any msgpack library can read them. Stream ids are chosen by the server
// (it opens every stream), unique per control connection.
//
// Flow control: each stream direction starts with INITIAL_WINDOW_BYTES of credit. A sender
// may have at most that many Data bytes unacknowledged; the receiver sends Credit as it
// hands bytes on to their destination (socket write accepted, not merely received), so a
// slow visitor or a slow local service stalls only its own stream, never the connection.
//
// Lanes: a server with several shards names the one a connection landed on in Welcome
// {shard, shards}, and gives each http tunnel a `laneKey` in Opened. The kernel spreads
// public connections over all shards, so a client that also holds a connection on every other
// shard (a lane: Open {type:'http', id, lane: laneKey} there) gets each visitor's stream on the
// shard the visitor reached, instead of relayed across threads by the tunnel's own shard.
// Lanes are optional (an old client never opens one) and end with the tunnel.

// HTTP streams (protocol 2): s→c Data carries the request body, decoded (the client frames it
// toward the local service from the head); c→s Data carries the local service's answer as it
// sent it, head and framing included, which the edge parses again (llhttp) before a visitor
// sees a byte: no structured response frame, no re-made response at either end. Credit counts
// those raw bytes.

export const PROTOCOL_VERSION = 2;

/** Frame type numbers (first array element). */
export const F = {
  /** c→s [1, {v, agent}] first frame; the server refuses another version with Fatal 'version'. */
  Hello: 1,
  /** s→c [2, {v, heartbeatMs, shard?, shards?}] hello accepted. */
  Welcome: 2,
  /** c→s [3, reqId, OpenRequest] register a tunnel on this connection. */
  Open: 3,
  /** s→c [4, reqId, Opened] tunnel registered: its id and public URL. */
  Opened: 4,
  /** s→c [5, reqId, Refusal] tunnel not registered (conflict, bad id, forbidden team...). */
  Refused: 5,
  /** s→c [6, tunnelId, Refusal] a live tunnel ended; `permanent` means do not re-register. */
  Closed: 6,
  /** c→s [7, tunnelId] the client gives a tunnel up (stop). */
  Close: 7,
  /** s→c [8, sid, tunnelId, StreamHead] a new visitor stream (HTTP request or TCP connection). */
  StreamOpen: 8,
  // 9 was Response (a structured response head, protocol 1): answers are raw Data now.
  /** both [10, sid, bytes] stream payload; costs its length in credit. */
  Data: 10,
  /** both [11, sid] no more Data in this direction (end of body / TCP half-close). */
  End: 11,
  /** both [12, sid, code] abort the stream in both directions (code: ResetCode). */
  Reset: 12,
  /** both [13, sid, bytes] the receiver consumed `bytes`: the sender may send that many more. */
  Credit: 13,
  /** both [14, n] heartbeat; answer with Pong n. */
  Ping: 14,
  /** both [15, n] heartbeat answer. */
  Pong: 15,
  /** s→c [16, Refusal] the whole connection is refused or ended (then the socket closes). */
  Fatal: 16,
  /** s→c [17, GoAway] the server drains: no new streams here; it closes once open ones end (≤ timeoutMs), then reconnect. */
  GoAway: 17,
  /**
   * s→c [18, {resume}] a fresh resumption ticket before Welcome's runs out, so a connection that
   * lives for days still comes back without a verification. Sent only on a connection whose
   * handshake carried TICKET_REFRESH_HEADER (an older client would close on an unknown frame).
   */
  Ticket: 18,
} as const;

/** Why a stream was reset; the server maps them to public status codes. */
export type ResetCode =
  /** the local service refused the connection or failed before a response (→ 502) */
  | 'local-unreachable'
  /** the local service answered something that is not HTTP/1.x (→ 502) */
  | 'local-invalid'
  /** the local service did not answer in time (→ 504) */
  | 'local-timeout'
  /** the visitor went away */
  | 'visitor-gone'
  /** the peer broke the protocol (credit overrun, frame out of order) */
  | 'protocol'
  /** the tunnel or connection is closing */
  | 'closing'
  /** (between shards) the tunnel is not on the shard the request was routed to (→ 404) */
  | 'no-tunnel'
  /** too many streams on the connection (→ 503) */
  | 'busy';

/** Codes of Refused / Closed / Fatal; the client treats `permanent` ones as final. */
export type RefusalCode = 'unauthorized' | 'forbidden' | 'conflict' | 'bad-request' | 'version' | 'not-found' | 'unavailable' | 'deleted' | 'taken-over' | 'expired' | 'internal';

export interface GoAway {
  /** the longest the server keeps this connection for streams still open */
  timeoutMs: number;
}
export interface Hello {
  v: number;
  agent: string;
  /** The client writes HttpHead.raw as it is (src/protocol/raw-head.ts); absent from older clients. */
  rawHeads?: boolean;
}
export interface Welcome {
  v: number;
  heartbeatMs: number;
  /** the shard this connection landed on (0-based), of `shards`; absent from older servers */
  shard?: number;
  shards?: number;
  /** burrowd's version ("0.9.0"), shown on the client's status screen; absent from older servers */
  version?: string;
  /** a resumption ticket: sent back in the RESUME_HEADER of the next handshake, it spares the key's verification */
  resume?: string;
  /** cluster: this node's --node-url */
  node?: string;
  /** cluster: the other live nodes' URLs (a client keeps a second connection on one of them) */
  nodes?: string[];
}
/** The control handshake's request header that carries Welcome's resumption ticket. */
export const RESUME_HEADER = 'burrow-resume';
/** The control handshake's request header saying the client takes Ticket frames ("1"). */
export const TICKET_REFRESH_HEADER = 'burrow-resume-refresh';
export interface Ticket {
  /** the next handshake's RESUME_HEADER, as Welcome.resume */
  resume: string;
}
/** Longest resumption ticket either side accepts (src/auth/resume-ticket.ts makes 59 characters). */
export const MAX_RESUME_TICKET_CHARS = 128;
export interface OpenRequest {
  type: 'http' | 'tcp';
  /** requested id (http and tcp); random when absent */
  id?: string | null;
  /** a team id, or the name of one of the user's teams */
  teamId?: string | null;
  /** tcp: requested public port; any free one of --tcp-port-range when absent */
  remotePort?: number | null;
  /** access rules the edge enforces before a visitor reaches the client (protocol/access.ts) */
  access?: AccessRules | null;
  /** the local service as the client names it ("http://localhost:3000"): shown in tunnel listings only */
  local?: string | null;
  /** with `id`: attach this connection as a lane of that live http tunnel (its Opened's laneKey) */
  lane?: string | null;
  /** several clients serve this id (a pool): join it, or start it */
  pool?: boolean;
  /** cluster, with `id`: this client's connection to another node joins its live tunnel (Opened.memberKey) */
  member?: string | null;
}
export interface Opened {
  id: string;
  url: string;
  remotePort: number | null;
  /** this registration closed a live tunnel of the same user that held the id (absent: false) */
  tookOver?: boolean;
  /** http on a server of several shards: the secret a lane of this registration presents */
  laneKey?: string;
  /** cluster: the secret this client's connection to another node presents to serve the tunnel there too (Open.member) */
  memberKey?: string;
}
export interface Refusal {
  code: RefusalCode;
  message: string;
  permanent: boolean;
  /** A transient refusal that knows when asking again can succeed (a rate limit): wait this long. */
  retryAfterMs?: number;
}
/** Longest wait a Refusal may ask for (an hour); a larger value is a malformed frame. */
export const MAX_RETRY_AFTER_MS = 3_600_000;
/** http: method, target (path + query), headers as a flat [name, value, ...] list in arrival order. */
export interface HttpHead {
  kind: 'http';
  method: string;
  target: string;
  headers: string[];
  /** true when the visitor asked for a WebSocket upgrade */
  upgrade: boolean;
  /** true when the request has no body: no End frame follows (saves a frame per GET) */
  end?: boolean;
  /**
   * To a client that said rawHeads in Hello: the head as the local service gets it (request
   * line, the fields above, the blank line), and `headers` is empty (src/protocol/raw-head.ts).
   */
  raw?: Uint8Array;
  /** With `raw`: the body comes as Data and goes chunked (`raw` says Transfer-Encoding: chunked). */
  chunked?: boolean;
  /**
   * The visitor's request came as an HTTP/2 stream: 'grpc' for a gRPC call (its content-type),
   * else 'h2'. Absent: HTTP/1.x (or a server older than the field). For the inspector only.
   */
  protocol?: 'h2' | 'grpc';
}
export interface TcpHead {
  kind: 'tcp';
  /** visitor address "ip:port" */
  remote: string;
}
export type StreamHead = HttpHead | TcpHead;
export interface ResponseHead {
  status: number;
  /** flat [name, value, ...] with the local service's case and order, hop-by-hop removed */
  headers: string[];
}

export type Frame =
  | [typeof F.Hello, Hello]
  | [typeof F.Welcome, Welcome]
  | [typeof F.Open, number, OpenRequest]
  | [typeof F.Opened, number, Opened]
  | [typeof F.Refused, number, Refusal]
  | [typeof F.Closed, string, Refusal]
  | [typeof F.Close, string]
  | [typeof F.StreamOpen, number, string, StreamHead]
  | [typeof F.Data, number, Uint8Array]
  | [typeof F.End, number]
  | [typeof F.Reset, number, ResetCode]
  | [typeof F.Credit, number, number]
  | [typeof F.Ping, number]
  | [typeof F.Pong, number]
  | [typeof F.Fatal, Refusal]
  | [typeof F.GoAway, GoAway]
  | [typeof F.Ticket, Ticket];

// ---- limits ---------------------------------------------------------------------------

/** Largest WebSocket message either side accepts; bigger closes the connection (1009). */
export const MAX_FRAME_BYTES = 1024 * 1024;
/** Largest Data payload a sender puts in one frame (bodies are split to this). */
export const MAX_DATA_BYTES = 256 * 1024;
/** Credit each stream direction starts with: the most a stalled stream can hold in buffers.
 *  Credit returns only after bytes were written out, through two busy event loops, so the
 *  "RTT" here is milliseconds under load: 1 MiB capped a bulk stream near 4 Gbit/s in
 *  bench tcp; 2 MiB (OpenSSH's channel window) gained ~10-20% more. */
export const INITIAL_WINDOW_BYTES = 2 * 1024 * 1024;
/** A receiver returns credit once it consumed this much, so Credit frames stay rare. */
export const CREDIT_BATCH_BYTES = 128 * 1024;
/** Request / response head size limit (sum of header names and values). */
export const MAX_HEAD_BYTES = 64 * 1024;
/** Both sides send Ping this often (burrowd --heartbeat-interval; Welcome tells the client)... */
export const HEARTBEAT_INTERVAL_MS = 5_000;
/** ...and drop a connection that sent nothing for this many intervals (a half-open TCP connection). */
export const HEARTBEAT_MISSES = 3;
/** Live streams per control connection; more are answered 503 at the edge. */
export const MAX_STREAMS_PER_CONNECTION = 4096;
/** Tunnels per control connection. */
export const MAX_TUNNELS_PER_CONNECTION = 64;
/** Welcome.nodes beyond this is malformed (a cluster larger than this names only some). */
export const MAX_CLUSTER_NODES = 64;

/** A node URL the client may dial: http(s), no credentials, printable, short. */
function checkNodeUrl(c: Fields, v: unknown, field: string): void {
  if (typeof v !== 'string' || v.length > 200 || !/^https?:\/\/[\x21-\x7e]+$/.test(v)) return c.fail(field, 'an http(s) URL of at most 200 printable characters', v);
  try {
    const u = new URL(v);
    if (u.username || u.password) c.fail(field, 'a URL without credentials', v);
  } catch {
    c.fail(field, 'an http(s) URL', v);
  }
}

/** burrowd --workers' bound: Welcome.shards beyond it is malformed. */
export const MAX_SHARDS = 256;
/** The server waits this long for the hello after the upgrade. */
export const HELLO_TIMEOUT_MS = 10_000;
/** The local service must send a response head within this (else 504). */
export const RESPONSE_HEAD_TIMEOUT_MS = 60_000;

// ---- codec ----------------------------------------------------------------------------

export class FrameError extends Error {}

export function encodeFrame(frame: Frame): Buffer {
  return encode(frame);
}

/**
 * The msgpack bytes of a Data frame *before* its payload: fixarray(3), type 10, sid as uint,
 * bin header. The hot path writes this head and the payload as two buffers (writev) instead
 * of copying the payload into a packed frame; the result is exactly encode([F.Data, sid, b]).
 */
export function dataFrameHead(sid: number, payloadBytes: number): Buffer {
  const h = Buffer.allocUnsafe(2 + uintSize(sid) + binHeadBytes(payloadBytes));
  h[0] = 0x93;
  h[1] = F.Data;
  writeBinHead(h, writeUint(h, 2, sid), payloadBytes);
  return h;
}

/**
 * A StreamOpen for a client that takes raw heads, written straight into one buffer: what
 * `encodeFrame([F.StreamOpen, sid, tunnelId, withRawHead(head)])` decodes to, without the head's
 * text as a string, its bytes as a second buffer, the head object, or msgpackr's walk over it.
 * The decoder is the ordinary one (a property test holds the two equal).
 */
export function rawStreamOpenFrame(sid: number, tunnelId: string, head: HttpHead): Buffer {
  const chunked = sendsChunked(head);
  const rawBytes = requestHeadLength(head, chunked);
  const idBytes = Buffer.byteLength(tunnelId);
  const methodBytes = Buffer.byteLength(head.method);
  const targetBytes = Buffer.byteLength(head.target);
  const protocol = head.protocol;
  const entries = 7 + (head.end ? 1 : 0) + (protocol ? 1 : 0);
  const size =
    2 + uintSize(sid) + strHeadBytes(idBytes) + idBytes + 1 +
    OPEN_KIND.length + OPEN_METHOD.length + strHeadBytes(methodBytes) + methodBytes + OPEN_TARGET.length + strHeadBytes(targetBytes) + targetBytes +
    OPEN_HEADERS.length + OPEN_UPGRADE.length + 1 + (head.end ? OPEN_END.length : 0) +
    OPEN_RAW.length + binHeadBytes(rawBytes) + rawBytes + OPEN_CHUNKED.length + 1 + (protocol ? OPEN_PROTOCOL.length + 1 + protocol.length : 0);
  const b = Buffer.allocUnsafe(size);
  b[0] = 0x94;
  b[1] = F.StreamOpen;
  let o = writeUint(b, 2, sid);
  o = writeStrHead(b, o, idBytes);
  o += b.write(tunnelId, o);
  b[o++] = 0x80 | entries;
  o += OPEN_KIND.copy(b, o);
  o += OPEN_METHOD.copy(b, o);
  o = writeStrHead(b, o, methodBytes);
  o += b.write(head.method, o);
  o += OPEN_TARGET.copy(b, o);
  o = writeStrHead(b, o, targetBytes);
  o += b.write(head.target, o);
  o += OPEN_HEADERS.copy(b, o);
  o += OPEN_UPGRADE.copy(b, o);
  b[o++] = head.upgrade ? 0xc3 : 0xc2;
  if (head.end) o += OPEN_END.copy(b, o);
  o += OPEN_RAW.copy(b, o);
  o = writeBinHead(b, o, rawBytes);
  o = writeRequestHead(head, chunked, b, o);
  o += OPEN_CHUNKED.copy(b, o);
  b[o++] = chunked ? 0xc3 : 0xc2;
  if (protocol) {
    o += OPEN_PROTOCOL.copy(b, o);
    b[o++] = 0xa0 | protocol.length;
    b.write(protocol, o, 'latin1');
  }
  return b;
}
// The fixed pieces of rawStreamOpenFrame: each key (a fixstr) and, where it never changes, its
// value; copied out of msgpackr's shared output buffer.
const OPEN_KIND = Buffer.concat([encode('kind'), encode('http')]);
const OPEN_METHOD = Buffer.from(encode('method'));
const OPEN_TARGET = Buffer.from(encode('target'));
const OPEN_HEADERS = Buffer.concat([encode('headers'), encode([])]);
const OPEN_UPGRADE = Buffer.from(encode('upgrade'));
const OPEN_END = Buffer.concat([encode('end'), encode(true)]);
const OPEN_RAW = Buffer.from(encode('raw'));
const OPEN_CHUNKED = Buffer.from(encode('chunked'));
const OPEN_PROTOCOL = Buffer.from(encode('protocol'));

// msgpack's uint, str and bin heads, in their shortest forms (as msgpackr writes them).
const uintSize = (n: number): number => (n < 0x80 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 5);
const strHeadBytes = (n: number): number => (n < 32 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 5);
const binHeadBytes = (n: number): number => (n < 0x100 ? 2 : n < 0x10000 ? 3 : 5);

function writeUint(b: Buffer, o: number, n: number): number {
  if (n < 0x80) b[o++] = n;
  else if (n < 0x100) (b[o++] = 0xcc), (b[o++] = n);
  else if (n < 0x10000) (b[o] = 0xcd), b.writeUInt16BE(n, o + 1), (o += 3);
  else (b[o] = 0xce), b.writeUInt32BE(n, o + 1), (o += 5);
  return o;
}

function writeStrHead(b: Buffer, o: number, n: number): number {
  if (n < 32) b[o++] = 0xa0 | n;
  else if (n < 0x100) (b[o++] = 0xd9), (b[o++] = n);
  else if (n < 0x10000) (b[o] = 0xda), b.writeUInt16BE(n, o + 1), (o += 3);
  else (b[o] = 0xdb), b.writeUInt32BE(n, o + 1), (o += 5);
  return o;
}

function writeBinHead(b: Buffer, o: number, n: number): number {
  if (n < 0x100) (b[o++] = 0xc4), (b[o++] = n);
  else if (n < 0x10000) (b[o] = 0xc5), b.writeUInt16BE(n, o + 1), (o += 3);
  else (b[o] = 0xc6), b.writeUInt32BE(n, o + 1), (o += 5);
  return o;
}

/** A whole Data frame in one buffer (one copy of the payload). */
export function dataFrame(sid: number, bytes: Uint8Array): Buffer {
  const head = dataFrameHead(sid, bytes.byteLength);
  const out = Buffer.allocUnsafe(head.length + bytes.byteLength);
  head.copy(out, 0);
  out.set(bytes, head.length);
  return out;
}

/** Largest stream id / request id / credit: the Data head writes them as msgpack uint32. */
export const MAX_UINT32 = 0xffff_ffff;
/** Short strings (tunnel and team ids, the agent, a visitor address): far above any valid one. */
const MAX_NAME_CHARS = 255;
/** Refusal messages and public URLs. */
const MAX_TEXT_CHARS = 4096;

export const RESET_CODES: readonly ResetCode[] = ['local-unreachable', 'local-invalid', 'local-timeout', 'visitor-gone', 'protocol', 'closing', 'no-tunnel', 'busy'];
export const REFUSAL_CODES: readonly RefusalCode[] = ['unauthorized', 'forbidden', 'conflict', 'bad-request', 'version', 'not-found', 'unavailable', 'deleted', 'taken-over', 'expired', 'internal'];

// RFC 9110 field-name token; a value may not carry CR, LF or NUL (a Response's headers are
// written to the visitor as they are: anything else would let a client split the response).
const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE_BAD_RE = /[\r\n\0]/;

/** What a bad value was, for the peer's error message (never the value itself when long). */
function shown(x: unknown): string {
  if (x === null) return 'null';
  if (x === undefined) return 'nothing';
  if (Array.isArray(x)) return 'an array';
  if (x instanceof Uint8Array) return 'bytes';
  if (typeof x === 'string') return x.length <= 40 ? `"${x}"` : `a string of ${x.length} characters`;
  if (typeof x === 'number') return Number.isFinite(x) ? `${x}` : String(x);
  return typeof x === 'object' ? 'a map' : `${typeof x} ${String(x)}`;
}

/** One frame's field checks; each failure names the frame and the field. */
class Fields {
  constructor(private readonly frame: string) {}
  fail(field: string, want: string, got: unknown): never {
    throw new FrameError(`malformed ${this.frame} frame: ${field} must be ${want}, got ${shown(got)}`);
  }
  int(x: unknown, field: string, min: number, max: number): number {
    if (typeof x !== 'number' || !Number.isInteger(x) || x < min || x > max) this.fail(field, `an integer in ${min}..${max}`, x);
    return x;
  }
  str(x: unknown, field: string, maxChars: number): string {
    if (typeof x !== 'string' || x.length > maxChars) this.fail(field, `a string of at most ${maxChars} characters`, x);
    return x;
  }
  /** Absent, null or a string. */
  optStr(x: unknown, field: string, maxChars: number): void {
    if (x !== undefined && x !== null && (typeof x !== 'string' || x.length > maxChars)) this.fail(field, `a string of at most ${maxChars} characters or null`, x);
  }
  bool(x: unknown, field: string): void {
    if (typeof x !== 'boolean') this.fail(field, 'true or false', x);
  }
  oneOf<T extends string>(x: unknown, field: string, members: readonly T[]): T {
    if (typeof x !== 'string' || !(members as readonly string[]).includes(x)) this.fail(field, `one of ${members.join(', ')}`, x);
    return x as T;
  }
  /** A plain map (not an array, bytes or an extension type). */
  map(x: unknown, field: string): Record<string, unknown> {
    if (typeof x !== 'object' || x === null || Object.getPrototypeOf(x) !== Object.prototype) this.fail(field, 'a map', x);
    return x as Record<string, unknown>;
  }
  /** A flat [name, value, ...] list; returns its total characters (the head limit). */
  headers(x: unknown, field: string, strictHttp: boolean): number {
    if (!Array.isArray(x) || x.length % 2 !== 0) this.fail(field, 'a flat list of name, value pairs', x);
    let chars = 0;
    for (let i = 0; i < x.length; i++) {
      const v: unknown = x[i];
      if (typeof v !== 'string') this.fail(`${field}[${i}]`, 'a string', v);
      chars += v.length;
      if (strictHttp && (i % 2 === 0 ? !TOKEN_RE.test(v) : FIELD_VALUE_BAD_RE.test(v))) {
        this.fail(`${field}[${i}]`, i % 2 === 0 ? 'a header name (token characters)' : 'a header value without CR, LF or NUL', v);
      }
    }
    return chars;
  }
  headLimit(chars: number): void {
    if (chars > MAX_HEAD_BYTES) throw new FrameError(`malformed ${this.frame} frame: the head is ${chars} characters, over ${MAX_HEAD_BYTES}`);
  }
  length(a: unknown[], n: number): void {
    if (a.length !== n) throw new FrameError(`malformed ${this.frame} frame: ${a.length} elements, expected ${n}`);
  }
}

const FRAME_NAMES = Object.fromEntries(Object.entries(F).map(([k, v]) => [v, k])) as Record<number, string>;

/** Sent back as a header value: a token's characters only, short. */
function checkTicket(c: Fields, x: unknown, field: string): void {
  if (!(typeof x === 'string' && x.length <= MAX_RESUME_TICKET_CHARS && /^[A-Za-z0-9._-]+$/.test(x))) c.fail(field, `at most ${MAX_RESUME_TICKET_CHARS} characters of [A-Za-z0-9._-]`, x);
}

function checkRefusal(c: Fields, x: unknown, field: string): void {
  const r = c.map(x, field);
  c.oneOf(r.code, `${field}.code`, REFUSAL_CODES);
  c.str(r.message, `${field}.message`, MAX_TEXT_CHARS);
  c.bool(r.permanent, `${field}.permanent`);
  // Optional, and unknown to protocol-2 clients before it, which ignore it.
  if (r.retryAfterMs !== undefined) c.int(r.retryAfterMs, `${field}.retryAfterMs`, 0, MAX_RETRY_AFTER_MS);
}

function checkStreamHead(c: Fields, x: unknown): void {
  const h = c.map(x, 'head');
  if (h.kind === 'tcp') return void c.str(h.remote, 'head.remote', MAX_NAME_CHARS);
  if (h.kind !== 'http') c.fail('head.kind', '"http" or "tcp"', h.kind);
  const chars = c.str(h.method, 'head.method', MAX_NAME_CHARS).length + c.str(h.target, 'head.target', MAX_HEAD_BYTES).length + c.headers(h.headers, 'head.headers', false);
  c.headLimit(chars);
  c.bool(h.upgrade, 'head.upgrade');
  if (h.end !== undefined) c.bool(h.end, 'head.end');
  if (h.protocol !== undefined && h.protocol !== 'h2' && h.protocol !== 'grpc') c.fail('head.protocol', '"h2" or "grpc"', h.protocol);
  if (h.raw !== undefined) {
    if (!(h.raw instanceof Uint8Array) || h.raw.byteLength > MAX_HEAD_BYTES + MAX_NAME_CHARS + 64) c.fail('head.raw', `bytes (at most ${MAX_HEAD_BYTES + MAX_NAME_CHARS + 64})`, h.raw);
    if ((h.headers as unknown[]).length !== 0) c.fail('head.headers', 'empty beside head.raw', h.headers);
    const problem = rawHeadProblem(h.raw as Uint8Array, h.method as string, h.target as string);
    if (problem) c.fail('head.raw', `a request head (${problem})`, '');
    if (h.chunked !== undefined) c.bool(h.chunked, 'head.chunked');
  } else if (h.chunked !== undefined) c.fail('head.chunked', 'only beside head.raw', h.chunked);
}

/** An Open's access rules: counts, sizes, credential and CIDR syntax (semantics: accessRulesProblem). */
function checkAccess(c: Fields, x: unknown): void {
  const a = c.map(x, 'open.access');
  const list = (v: unknown, field: string, max: number): unknown[] | null => {
    if (v === undefined || v === null) return null;
    if (!Array.isArray(v) || v.length > max) c.fail(field, `a list of at most ${max}`, v);
    return v;
  };
  const creds = list(a.basicAuth, 'open.access.basicAuth', MAX_BASIC_AUTH);
  creds?.forEach((v, i) => {
    // The credential itself is never quoted back: it holds a password.
    if (typeof v !== 'string') c.fail(`open.access.basicAuth[${i}]`, 'a string', v);
    const problem = basicAuthProblem(v);
    if (problem) throw new FrameError(`malformed Open frame: open.access.basicAuth[${i}]: ${problem}`);
  });
  for (const key of ['allowIp', 'denyIp'] as const) {
    list(a[key], `open.access.${key}`, MAX_CIDRS)?.forEach((v, i) => {
      if (typeof v !== 'string' || !parseCidr(v)) c.fail(`open.access.${key}[${i}]`, 'an IPv4 or IPv6 address or CIDR', v);
    });
  }
  if (a.expiresAt !== undefined && a.expiresAt !== null) c.int(a.expiresAt, 'open.access.expiresAt', 0, Number.MAX_SAFE_INTEGER);
  for (const k of Object.keys(a)) if (!['basicAuth', 'allowIp', 'denyIp', 'expiresAt'].includes(k)) c.fail(`open.access.${k.slice(0, 40)}`, 'absent (unknown field)', a[k]);
}

/** Checks every field of a decoded frame against its type; throws FrameError naming the field. */
function checkFrame(a: unknown[]): void {
  const type = a[0] as number;
  const c = new Fields(FRAME_NAMES[type] ?? `type ${type}`);
  switch (type) {
    case F.Data:
      c.length(a, 3);
      c.int(a[1], 'stream id', 0, MAX_UINT32);
      if (!(a[2] instanceof Uint8Array) || a[2].byteLength > MAX_DATA_BYTES) c.fail('payload', `bytes (at most ${MAX_DATA_BYTES})`, a[2]);
      return;
    case F.Credit:
      c.length(a, 3);
      c.int(a[1], 'stream id', 0, MAX_UINT32);
      c.int(a[2], 'bytes', 0, MAX_UINT32);
      return;
    case F.End:
      c.length(a, 2);
      c.int(a[1], 'stream id', 0, MAX_UINT32);
      return;
    case F.Reset:
      c.length(a, 3);
      c.int(a[1], 'stream id', 0, MAX_UINT32);
      c.oneOf(a[2], 'code', RESET_CODES);
      return;
    case F.Hello: {
      c.length(a, 2);
      const h = c.map(a[1], 'hello');
      c.int(h.v, 'hello.v', 0, MAX_UINT32);
      c.str(h.agent, 'hello.agent', MAX_NAME_CHARS);
      if (h.rawHeads !== undefined) c.bool(h.rawHeads, 'hello.rawHeads');
      return;
    }
    case F.Welcome: {
      c.length(a, 2);
      const w = c.map(a[1], 'welcome');
      c.int(w.v, 'welcome.v', 0, MAX_UINT32);
      c.int(w.heartbeatMs, 'welcome.heartbeatMs', 0, MAX_UINT32);
      if (w.shards !== undefined) c.int(w.shards, 'welcome.shards', 1, MAX_SHARDS);
      if (w.shard !== undefined) c.int(w.shard, 'welcome.shard', 0, (typeof w.shards === 'number' ? w.shards : MAX_SHARDS) - 1);
      // Printed on the user's terminal: printable ASCII only (no escape sequences), short.
      if (w.version !== undefined && !(typeof w.version === 'string' && /^[\x21-\x7e]{1,64}$/.test(w.version))) c.fail('welcome.version', 'at most 64 printable ASCII characters', w.version);
      if (w.resume !== undefined) checkTicket(c, w.resume, 'welcome.resume');
      if (w.node !== undefined) checkNodeUrl(c, w.node, 'welcome.node');
      if (w.nodes !== undefined) {
        if (!Array.isArray(w.nodes) || w.nodes.length > MAX_CLUSTER_NODES) c.fail('welcome.nodes', `an array of at most ${MAX_CLUSTER_NODES} URLs`, w.nodes);
        for (const n of w.nodes as unknown[]) checkNodeUrl(c, n, 'welcome.nodes[]');
      }
      return;
    }
    case F.Open: {
      c.length(a, 3);
      c.int(a[1], 'request id', 0, MAX_UINT32);
      const o = c.map(a[2], 'open');
      c.oneOf(o.type, 'open.type', ['http', 'tcp'] as const);
      c.optStr(o.id, 'open.id', MAX_NAME_CHARS);
      c.optStr(o.teamId, 'open.teamId', MAX_NAME_CHARS);
      if (o.remotePort !== undefined && o.remotePort !== null) c.int(o.remotePort, 'open.remotePort', 1, 65535);
      if (o.access !== undefined && o.access !== null) checkAccess(c, o.access);
      c.optStr(o.local, 'open.local', MAX_NAME_CHARS);
      // Shown to other users (team members, admins): printable ASCII only, no control characters.
      if (typeof o.local === 'string' && !/^[\x21-\x7e]*$/.test(o.local)) c.fail('open.local', 'printable ASCII without spaces', o.local);
      c.optStr(o.lane, 'open.lane', MAX_NAME_CHARS);
      if (typeof o.lane === 'string' && (o.type !== 'http' || typeof o.id !== 'string')) c.fail('open.lane', 'only with type "http" and an id', o.lane);
      if (o.pool !== undefined) c.bool(o.pool, 'open.pool');
      c.optStr(o.member, 'open.member', MAX_NAME_CHARS);
      if (typeof o.member === 'string' && typeof o.id !== 'string') c.fail('open.member', 'only with an id', o.member);
      return;
    }
    case F.Opened: {
      c.length(a, 3);
      c.int(a[1], 'request id', 0, MAX_UINT32);
      const o = c.map(a[2], 'opened');
      c.str(o.id, 'opened.id', MAX_NAME_CHARS);
      c.str(o.url, 'opened.url', MAX_TEXT_CHARS);
      if (o.remotePort !== undefined && o.remotePort !== null) c.int(o.remotePort, 'opened.remotePort', 1, 65535);
      if (o.tookOver !== undefined) c.bool(o.tookOver, 'opened.tookOver');
      if (o.laneKey !== undefined) c.str(o.laneKey, 'opened.laneKey', MAX_NAME_CHARS);
      if (o.memberKey !== undefined) c.str(o.memberKey, 'opened.memberKey', MAX_NAME_CHARS);
      return;
    }
    case F.Refused:
      c.length(a, 3);
      c.int(a[1], 'request id', 0, MAX_UINT32);
      return checkRefusal(c, a[2], 'refusal');
    case F.Closed:
      c.length(a, 3);
      c.str(a[1], 'tunnel id', MAX_NAME_CHARS);
      return checkRefusal(c, a[2], 'refusal');
    case F.Close:
      c.length(a, 2);
      c.str(a[1], 'tunnel id', MAX_NAME_CHARS);
      return;
    case F.StreamOpen:
      c.length(a, 4);
      c.int(a[1], 'stream id', 0, MAX_UINT32);
      c.str(a[2], 'tunnel id', MAX_NAME_CHARS);
      return checkStreamHead(c, a[3]);
    case F.Ping:
    case F.Pong:
      // A millisecond clock reading (Date.now()), above uint32.
      c.length(a, 2);
      c.int(a[1], 'n', 0, Number.MAX_SAFE_INTEGER);
      return;
    case F.Fatal:
      c.length(a, 2);
      return checkRefusal(c, a[1], 'refusal');
    case F.GoAway: {
      c.length(a, 2);
      const g = c.map(a[1], 'goAway');
      c.int(g.timeoutMs, 'goAway.timeoutMs', 0, MAX_UINT32);
      return;
    }
    case F.Ticket:
      c.length(a, 2);
      return checkTicket(c, c.map(a[1], 'ticket').resume, 'ticket.resume');
    default:
      throw new FrameError(`unknown frame type ${shown(type)}`);
  }
}

/**
 * Decodes one frame and checks every field's type, range and length (never trust the peer:
 * what passes here cannot make a handler throw). Bin payloads are views into `bytes` (a message
 * buffer nobody reuses, so a view may be kept).
 */
export function decodeFrame(bytes: Uint8Array): Frame {
  if (bytes.byteLength > MAX_FRAME_BYTES) throw new FrameError(`frame of ${bytes.byteLength} bytes is over ${MAX_FRAME_BYTES}`);
  const stream = decodeStreamFrame(bytes);
  if (stream !== null) return stream;
  let f: unknown;
  try {
    f = decode(bytes);
  } catch (err) {
    throw new FrameError(`not msgpack: ${(err as Error).message}`);
  }
  if (!Array.isArray(f) || typeof f[0] !== 'number') throw new FrameError('frame is not an array starting with its type');
  checkFrame(f as unknown[]);
  return f as Frame;
}

/**
 * Data, End and Credit (nearly every frame of a busy tunnel) read straight from their bytes:
 * the same frame msgpack gives, with its checks, without the general decoder's work. Anything
 * not in exactly the shortest encoding these frames are written in returns null and takes the
 * general way (which decodes or refuses it as before).
 */
function decodeStreamFrame(b: Uint8Array): Frame | null {
  const n = b.byteLength;
  if (n < 3) return null;
  const array = b[0];
  const type = b[1];
  if (array === 0x93 && type === F.Data) {
    const d = dataHeadOf(b);
    if (d === null || d.headBytes + d.payloadBytes !== n) return null;
    return [F.Data, d.sid, b.subarray(d.headBytes, n)];
  }
  if (array === 0x94 && type === F.StreamOpen) return decodeRawStreamOpen(b);
  if (array === 0x92 && type === F.End) {
    const sid = readUint(b, 2);
    return sid >= 0 && 2 + uintBytes(b[2]!) === n ? [F.End, sid] : null;
  }
  if (array === 0x93 && type === F.Credit) {
    const sid = readUint(b, 2);
    if (sid < 0) return null;
    const o = 2 + uintBytes(b[2]!);
    if (o >= n) return null;
    const bytes = readUint(b, o);
    return bytes >= 0 && o + uintBytes(b[o]!) === n ? [F.Credit, sid, bytes] : null;
  }
  return null;
}

/**
 * A StreamOpen laid out exactly as rawStreamOpenFrame writes it, read straight from its bytes
 * with the checks checkStreamHead makes: ASCII strings only, the raw head a view into `b`.
 * Anything else (another order, a non-ASCII target, a head the checks refuse) returns null and
 * takes the general way, which decodes it or says what is wrong.
 */
function decodeRawStreamOpen(b: Uint8Array): Frame | null {
  if (!Buffer.isBuffer(b)) return null;
  const n = b.byteLength;
  const sid = readUint(b, 2);
  if (sid < 0) return null;
  let o = 2 + uintBytes(b[2]!);
  const id = asciiAt(b, o, MAX_NAME_CHARS, lastTunnelId);
  if (id === null) return null;
  lastTunnelId = id;
  o = asciiEnd;
  // A fixmap of 7 to 9 entries (end and protocol are optional).
  const map = b[o++];
  if (map === undefined || map < 0x87 || map > 0x89) return null;
  const entries = map - 0x80;
  if (!bytesAt(b, o, OPEN_KIND) || !bytesAt(b, (o += OPEN_KIND.length), OPEN_METHOD)) return null;
  const method = asciiAt(b, o + OPEN_METHOD.length, MAX_NAME_CHARS, lastMethod);
  if (method === null || !bytesAt(b, asciiEnd, OPEN_TARGET)) return null;
  lastMethod = method;
  const target = asciiAt(b, asciiEnd + OPEN_TARGET.length, MAX_HEAD_BYTES);
  if (target === null || method.length + target.length > MAX_HEAD_BYTES || !bytesAt(b, asciiEnd, OPEN_HEADERS) || !bytesAt(b, (o = asciiEnd + OPEN_HEADERS.length), OPEN_UPGRADE)) return null;
  o += OPEN_UPGRADE.length;
  const upgrade = b[o] === 0xc3;
  if (!upgrade && b[o] !== 0xc2) return null;
  o++;
  let seen = 7;
  const end = bytesAt(b, o, OPEN_END);
  if (end) (o += OPEN_END.length), seen++;
  if (!bytesAt(b, o, OPEN_RAW)) return null;
  o += OPEN_RAW.length;
  const marker = b[o];
  let len: number;
  if (marker === 0xc4 && o + 2 <= n) (len = b[o + 1]!), (o += 2);
  else if (marker === 0xc5 && o + 3 <= n) (len = (b[o + 1]! << 8) | b[o + 2]!), (o += 3);
  else return null;
  if (len > MAX_HEAD_BYTES + MAX_NAME_CHARS + 64 || o + len > n) return null;
  const raw = b.subarray(o, (o += len));
  if (!bytesAt(b, o, OPEN_CHUNKED)) return null;
  o += OPEN_CHUNKED.length;
  const chunked = b[o] === 0xc3;
  if (!chunked && b[o] !== 0xc2) return null;
  o++;
  let protocol: 'h2' | 'grpc' | undefined;
  if (o < n) {
    if (!bytesAt(b, o, OPEN_PROTOCOL)) return null;
    const p = asciiAt(b, o + OPEN_PROTOCOL.length, 4);
    if (p !== 'h2' && p !== 'grpc') return null;
    (protocol = p), (o = asciiEnd), seen++;
  }
  if (o !== n || seen !== entries || rawHeadProblem(raw, method, target) !== null) return null;
  const head: HttpHead = { kind: 'http', method, target, headers: [], upgrade, raw, chunked };
  if (end) head.end = true;
  if (protocol) head.protocol = protocol;
  return [F.StreamOpen, sid, id, head];
}

/** Where the last asciiAt's string ended. */
let asciiEnd = 0;
/** The last tunnel id and method read: a connection's streams mostly repeat them, so no new string. */
let lastTunnelId = '';
let lastMethod = '';

/**
 * The msgpack str (fixstr, str8, str16) at `o` when it is ASCII and at most `max` long, else
 * null; `same` itself when the bytes spell it.
 */
function asciiAt(b: Buffer, o: number, max: number, same = ''): string | null {
  const m = b[o];
  let len: number;
  if (m === undefined) return null;
  if ((m & 0xe0) === 0xa0) (len = m & 0x1f), o++;
  else if (m === 0xd9 && o + 2 <= b.byteLength) (len = b[o + 1]!), (o += 2);
  else if (m === 0xda && o + 3 <= b.byteLength) (len = (b[o + 1]! << 8) | b[o + 2]!), (o += 3);
  else return null;
  const e = o + len;
  if (len > max || e > b.byteLength) return null;
  for (let i = o; i < e; i++) if (b[i]! >= 0x80) return null;
  asciiEnd = e;
  if (same.length === len) {
    let i = 0;
    while (i < len && b[o + i] === same.charCodeAt(i)) i++;
    if (i === len) return same;
  }
  return b.toString('latin1', o, e);
}

function bytesAt(b: Uint8Array, o: number, want: Buffer): boolean {
  if (o + want.length > b.byteLength) return false;
  for (let i = 0; i < want.length; i++) if (b[o + i] !== want[i]) return false;
  return true;
}

/** A Data frame's head read from the first piece of a message that came in pieces. */
export interface DataHead {
  sid: number;
  /** Bytes of the head (array, type, sid, bin header): the payload starts there. */
  headBytes: number;
  payloadBytes: number;
}

/**
 * The head of a Data frame in its shortest encoding at the start of `b` (the frame's first
 * piece), or null: anything else takes the whole-message way (decodeFrame). The payload's
 * length is checked against MAX_DATA_BYTES here; the caller checks that the pieces hold it.
 */
export function dataHeadOf(b: Uint8Array): DataHead | null {
  if (b.byteLength < 4 || b[0] !== 0x93 || b[1] !== F.Data) return null;
  const sid = readUint(b, 2);
  if (sid < 0) return null;
  let o = 2 + uintBytes(b[2]!);
  const n = b.byteLength;
  const marker = b[o];
  let len: number;
  if (marker === 0xc4 && o + 2 <= n) (len = b[o + 1]!), (o += 2);
  else if (marker === 0xc5 && o + 3 <= n) (len = (b[o + 1]! << 8) | b[o + 2]!), (o += 3);
  else if (marker === 0xc6 && o + 5 <= n) (len = ((b[o + 1]! << 24) >>> 0) + ((b[o + 2]! << 16) | (b[o + 3]! << 8) | b[o + 4]!)), (o += 5);
  else return null;
  return len > MAX_DATA_BYTES ? null : { sid, headBytes: o, payloadBytes: len };
}

/** Bytes of the msgpack unsigned integer whose first byte is `first` (fixint, uint8/16/32); 0: not one. */
function uintBytes(first: number): number {
  return first < 0x80 ? 1 : first === 0xcc ? 2 : first === 0xcd ? 3 : first === 0xce ? 5 : 0;
}

/** The msgpack unsigned integer (up to uint32) at `o`, or -1 (another type, or cut short). */
function readUint(b: Uint8Array, o: number): number {
  const first = b[o]!;
  const size = uintBytes(first);
  if (size === 0 || o + size > b.byteLength) return -1;
  if (size === 1) return first;
  if (size === 2) return b[o + 1]!;
  if (size === 3) return (b[o + 1]! << 8) | b[o + 2]!;
  return ((b[o + 1]! << 24) >>> 0) + ((b[o + 2]! << 16) | (b[o + 3]! << 8) | b[o + 4]!);
}

// ---- tunnel ids: in tunnel-id.ts (the CLI checks ids without loading msgpack) ------------
export { RESERVED_IDS, randomTunnelId, tunnelIdProblem } from './tunnel-id.js';
