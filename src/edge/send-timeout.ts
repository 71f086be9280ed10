import type { Socket } from 'node:net';

// nginx's send_timeout for the public port: a visitor that stops reading its answer holds the
// answer's bytes in this process (and the stream's window at the tunnel client) for as long as
// its connection lives, and the idle timer is off while an answer is due. So once a write
// backs up (the socket is over its high-water mark), the connection must show progress (bytes
// taken by the kernel) at least once every `ms`, or it is destroyed.
//
// One timer per connection, armed only while its output is backed up: a visitor that reads
// costs nothing here. It looks every quarter of the timeout, so a connection is closed between
// `ms` and 1.25 × `ms` after its last progress (a check only at each `ms` would allow twice that).

export class SendTimeout {
  private timer: NodeJS.Timeout | null = null;
  /** Bytes the kernel had taken at the last look, and when that figure last grew. */
  private sent = 0;
  private progressAt = 0;

  constructor(
    private readonly socket: Socket,
    private readonly ms: number,
  ) {}

  /** After writes: starts watching if the socket's buffer is over its high-water mark. */
  check(): void {
    if (this.timer !== null || !this.socket.writableNeedDrain || this.socket.destroyed) return;
    this.sent = delivered(this.socket);
    this.progressAt = Date.now();
    this.timer = setTimeout(this.fire, this.ms / 4);
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private readonly fire = (): void => {
    this.timer = null;
    const socket = this.socket;
    if (socket.destroyed || socket.writableLength === 0) return;
    const sent = delivered(socket);
    if (sent !== this.sent) {
      // Progress, however slow: the timeout counts from now.
      this.sent = sent;
      this.progressAt = Date.now();
    } else if (Date.now() - this.progressAt >= this.ms) {
      socket.destroy();
      return;
    }
    this.timer = setTimeout(this.fire, this.ms / 4);
  };
}

/** Bytes written to the socket that left its buffer (bytesWritten counts the buffered ones too). */
function delivered(socket: Socket): number {
  return socket.bytesWritten - socket.writableLength;
}
