import type { PGlite } from '@electric-sql/pglite';

// PGlite has one backend session; pglite-socket multiplexes every client connection onto
// it, one wire-protocol message at a time. Its own queue (0.2.17) keeps a connection's turn
// only inside an explicit transaction, so between one connection's Bind and Execute another
// connection's Parse/Bind can replace the unnamed portal ("portal \"\" does not exist"),
// and after a failed message its queue stops for good (electric-sql/pglite#1046).
//
// This queue gives the session to one connection from its first message until PGlite
// answers ReadyForQuery with status idle ('I'): a whole Sync cycle, or a whole transaction.
// A connection that goes away gives the turn back (rolling back its open transaction).

interface Item {
  handlerId: number;
  message: Uint8Array;
  onData: (data: Uint8Array) => void;
  resolve: (bytes: number) => void;
  reject: (err: Error) => void;
}

const READY_FOR_QUERY = 0x5a; // 'Z'
const IDLE = 0x49; // 'I'

/** Status byte of the last ReadyForQuery in a chunk of backend messages, or null. */
export function lastReadyStatus(chunks: Uint8Array[]): number | null {
  const buf = Buffer.concat(chunks);
  let status: number | null = null;
  let at = 0;
  while (at + 5 <= buf.length) {
    const len = buf.readInt32BE(at + 1);
    if (len < 4) break;
    if (buf[at] === READY_FOR_QUERY && len === 5 && at + 6 <= buf.length) status = buf[at + 5]!;
    at += 1 + len;
  }
  return status;
}

export class SessionQueue {
  private queue: Item[] = [];
  private owner: number | null = null;
  private processing = false;

  constructor(private readonly db: PGlite) {}

  enqueue(handlerId: number, message: Uint8Array, onData: (data: Uint8Array) => void): Promise<number> {
    return new Promise((resolve, reject) => {
      this.queue.push({ handlerId, message, onData, resolve, reject });
      void this.process();
    });
  }

  getQueueLength(): number {
    return this.queue.length;
  }

  clearQueueForHandler(handlerId: number): void {
    this.queue = this.queue.filter((i) => {
      if (i.handlerId !== handlerId) return true;
      i.reject(new Error('connection closed'));
      return false;
    });
  }

  async clearTransactionIfNeeded(handlerId: number): Promise<void> {
    if (this.owner !== handlerId) return;
    if (this.db.isInTransaction()) await this.db.exec('ROLLBACK').catch(() => undefined);
    this.owner = null;
    void this.process();
  }

  private next(): Item | undefined {
    if (this.owner === null) return this.queue.shift();
    const at = this.queue.findIndex((i) => i.handlerId === this.owner);
    return at === -1 ? undefined : this.queue.splice(at, 1)[0];
  }

  private async process(): Promise<void> {
    if (this.processing) return;
    this.processing = true;
    try {
      for (let item = this.next(); item; item = this.next()) {
        this.owner = item.handlerId;
        const out: Uint8Array[] = [];
        let bytes = 0;
        try {
          await this.db.runExclusive(() =>
            this.db.execProtocolRawStream(item!.message, {
              onRawData: (data: Uint8Array) => {
                bytes += data.length;
                out.push(data.slice());
                item!.onData(data);
              },
            }),
          );
          item.resolve(bytes);
        } catch (err) {
          item.reject(err as Error);
        }
        if (lastReadyStatus(out) === IDLE) this.owner = null;
      }
    } finally {
      this.processing = false;
    }
  }
}
