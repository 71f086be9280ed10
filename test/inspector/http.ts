// A plain HTTP/1.1 client for the inspector tests: node:http, so a test can send any Host or
// Origin header (fetch may not), with a deadline on every call.
import http from 'node:http';
import { withDeadline } from '../helpers/deadline.js';

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
  json<T = unknown>(): T;
}

export function call(url: string, opts: { method?: string; headers?: Record<string, string>; body?: string | Buffer } = {}, ms = 20_000): Promise<Reply> {
  const u = new URL(url);
  return withDeadline(
    new Promise<Reply>((resolve, reject) => {
      const req = http.request({ host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port, path: u.pathname + u.search, method: opts.method ?? 'GET', headers: opts.headers, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks);
          resolve({ status: res.statusCode!, headers: res.headers, body, text: body.toString(), json: <T>() => JSON.parse(body.toString()) as T });
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(opts.body);
    }),
    ms,
    `${opts.method ?? 'GET'} ${url}`,
  );
}

/** Reads server-sent events from `url` until `until` returns true for the events so far. */
export function readEvents(url: string, until: (events: { event: string; data: string }[]) => boolean, ms = 20_000): Promise<{ event: string; data: string }[]> {
  const u = new URL(url);
  return withDeadline(
    new Promise((resolve, reject) => {
      const events: { event: string; data: string }[] = [];
      const req = http.get({ host: u.hostname, port: u.port, path: u.pathname, agent: false }, (res) => {
        let buf = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          buf += d;
          let i: number;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let event = 'message';
            const data: string[] = [];
            for (const line of block.split('\n')) {
              if (line.startsWith('event: ')) event = line.slice(7);
              else if (line.startsWith('data: ')) data.push(line.slice(6));
            }
            if (data.length) events.push({ event, data: data.join('\n') });
          }
          if (until(events)) {
            req.destroy();
            resolve(events);
          }
        });
      });
      req.on('error', reject);
    }),
    ms,
    `events of ${url}`,
  );
}
