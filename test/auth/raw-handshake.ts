import { connect } from 'node:net';
import { randomBytes } from 'node:crypto';

/**
 * One raw control handshake (`GET /tunnel/v1/connect`) from the loopback address `from`: the
 * status of its answer (0: none within `ms`, -1: the connection failed before one).
 */
export function rawHandshake(port: number, from: string, key: string, ms = 10_000): Promise<number> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port, localAddress: from });
    let head = '';
    const done = (status: number): void => {
      clearTimeout(timer);
      s.destroy();
      resolve(status);
    };
    const timer = setTimeout(() => done(0), ms);
    s.setEncoding('latin1');
    s.on('connect', () =>
      s.write(
        `GET /tunnel/v1/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nAuthorization: Bearer ${key}\r\n\r\n`,
      ),
    );
    s.on('data', (d: string) => {
      head += d;
      const m = /^HTTP\/1\.1 (\d{3}) /.exec(head);
      if (m) done(Number(m[1]));
    });
    s.on('error', () => done(-1));
    s.on('close', () => done(-1));
  });
}
