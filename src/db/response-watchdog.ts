import type { Socket } from 'node:net';

// A frozen link to PostgreSQL (a partition, a hung proxy) never errors: TCP keeps the
// connection, the query waits forever and holds its pool slot, and TCP keepalive notices only
// after minutes. The watchdog destroys a connection that waited `timeoutMs` for an answer;
// postgres.js then fails its queries (→ 503) and opens a fresh connection for the next one.
//
// "Waiting" = we wrote something and the backend has not come back to ReadyForQuery ('Z')
// since: the backend's messages are framed (type byte + int32 length), so the last message
// of a read tells whether the connection went idle. A statement that runs long but still
// answers within `timeoutMs` never trips it (the server's statement_timeout is shorter).

const READY_FOR_QUERY = 0x5a; // 'Z'

export function watchResponses(socket: Socket, timeoutMs: number): void {
  let timer: NodeJS.Timeout | null = null;
  /** Bytes of the current message body still to skip. */
  let skip = 0;
  /** Header bytes of the next message collected so far (a header may straddle reads). */
  const header = Buffer.alloc(5);
  let headerLen = 0;
  let lastType = 0;
  /** A request was written and its ReadyForQuery has not arrived (async notices do not arm). */
  let waiting = false;

  const fire = (): void => {
    timer = null;
    socket.destroy(Object.assign(new Error(`the database sent no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' }));
  };
  const arm = (): void => {
    if (timer) timer.refresh();
    else (timer = setTimeout(fire, timeoutMs)).unref();
  };
  const disarm = (): void => {
    if (timer) clearTimeout(timer);
    timer = null;
  };

  const write = socket.write.bind(socket) as (...a: unknown[]) => boolean;
  socket.write = ((...a: unknown[]) => {
    waiting = true;
    arm();
    return write(...a);
  }) as Socket['write'];

  socket.on('data', (chunk: Buffer) => {
    let i = 0;
    while (i < chunk.length) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length - i);
        skip -= n;
        i += n;
        continue;
      }
      const n = Math.min(5 - headerLen, chunk.length - i);
      chunk.copy(header, headerLen, i, i + n);
      headerLen += n;
      i += n;
      if (headerLen === 5) {
        lastType = header[0]!;
        skip = Math.max(0, header.readInt32BE(1) - 4);
        headerLen = 0;
      }
    }
    if (skip === 0 && headerLen === 0 && lastType === READY_FOR_QUERY) {
      // Pipelined requests after this one lose their watch until the next write re-arms it.
      waiting = false;
      disarm();
    } else if (waiting) arm();
  });
  socket.once('close', disarm);
}
