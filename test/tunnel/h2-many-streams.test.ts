import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import http2, { type ClientHttp2Session } from 'node:http2';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { RunningBurrows, tempDir } from '../cli/harness.js';
import { listen, streamLargeAnswer, type Local } from './helpers.js';
import { RawH2, T, FLAG, frame, getBlock } from './h2-raw.js';

// Many HTTP/2 streams asking for large answers at once, through a real burrowd (its buffer budget
// lowered to 1 MiB, so its limits are reached cheaply) and a real `burrow http`. h2load -c16 -m64
// for 1 MiB answers found: nothing completed for seconds after a run whose visitors had left (their
// sessions, half-open, kept being answered in full), answers cut at the buffer ceiling arriving as
// short 200s, and the tunnel client reading every answer whole into memory. Every stream must end
// in its whole answer or a clear refusal (503, or a reset that is an error), and soon.

const MiB = 1024 * 1024;
const ONE_MIB = Buffer.alloc(MiB, 0x61);
const BIG = 24 * MiB;
let local: Local;
/** Its buffer budget lowered to 1 MiB (a 2 MiB ceiling): the limits are reached cheaply. */
let server: TestServer;
let host = '';
/** Answers of /big the local service could not finish (their stream was reset). */
let bigCut = 0;
const burrows = new RunningBurrows();
const home = tempDir();

test.before(async () => {
  local = await listen(
    http.createServer((req, res) => {
      if (req.url === '/1m') {
        res.writeHead(200, { 'content-length': String(MiB), 'content-type': 'application/octet-stream' });
        return void res.end(ONE_MIB);
      }
      streamLargeAnswer(res, BIG, () => bigCut++);
    }),
  );
  ({ server, host } = await edge(['--visitor-buffer-budget', '1'], 'many'));
});

/** A burrowd with `args` and a `burrow http` toward the local service on it, as `id`. */
async function edge(args: string[], id: string): Promise<{ server: TestServer; host: string }> {
  const srv = await startServer({ workers: 1, args: ['--visitor-concurrency', '4096', ...args] });
  const child = burrows.start({ configDir: home.dir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: srv.adminKey } }, ['http', String(local.port), '--id', id, '--no-inspect']);
  return { server: srv, host: new URL(await burrows.firstLine(child)).host };
}

test.after(async () => {
  burrows.killAll();
  await server?.stop();
  await local?.close();
  home.remove();
});

type Outcome = 'whole' | 'short' | 'refused' | 'reset' | `status ${number}`;

/** GET `path` on `session`: how the stream ended. */
function fetchOutcome(session: ClientHttp2Session, authority: string, path: string, expected: number): Promise<Outcome> {
  return new Promise((resolve) => {
    const req = session.request({ ':path': path, ':authority': authority });
    let status = 0;
    let bytes = 0;
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (d: Buffer) => (bytes += d.byteLength));
    req.on('error', () => undefined);
    req.on('close', () => {
      // node:http2 ends a stream reset with NO_ERROR as if it were complete: tell it apart.
      if (req.rstCode !== http2.constants.NGHTTP2_NO_ERROR) return resolve('reset');
      if (status === 503) return resolve('refused');
      if (status !== 200) return resolve(`status ${status}`);
      resolve(bytes === expected ? 'whole' : 'short');
    });
    req.end();
  });
}

function connect(srv: TestServer): ClientHttp2Session {
  const session = http2.connect(`http://127.0.0.1:${srv.port}`);
  session.on('error', () => undefined);
  return session;
}

test('8 connections × 32 streams of 1 MiB: each ends whole, refused (503) or reset with an error, none short, within the bound', async () => {
  const sessions = Array.from({ length: 8 }, () => connect(server));
  try {
    const outcomes = await withDeadline(Promise.all(sessions.flatMap((s) => Array.from({ length: 32 }, () => fetchOutcome(s, host, '/1m', MiB)))), 60_000, '256 streams to end');
    const counts: Record<string, number> = {};
    for (const o of outcomes) counts[o] = (counts[o] ?? 0) + 1;
    const summary = JSON.stringify(counts);
    assert.ok(outcomes.every((o) => o === 'whole' || o === 'refused' || o === 'reset'), `every stream whole, 503 or reset with an error: ${summary}`);
    assert.ok((counts.whole ?? 0) > 0, `streams made progress: ${summary}`);
    console.log(`  256 streams through a 1 MiB budget: ${summary}`);
  } finally {
    for (const s of sessions) s.destroy();
  }
});

test("a visitor's FIN ends its session: the connection closes and the answer it can no longer take stops", async () => {
  const before = bigCut;
  const raw = await RawH2.connect(server.port);
  try {
    raw.write(frame(T.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, 1, getBlock(host, '/big')));
    assert.ok(await raw.until(() => raw.frames.some((f) => f.type === T.DATA && f.stream === 1), 10_000), 'the answer started');
    raw.socket.end();
    assert.ok(await raw.until(() => raw.closed, 5_000), 'burrowd closed the connection after the FIN');
    await eventually(() => bigCut > before || undefined, 10_000, 'the local service sees its answer cut');
  } finally {
    raw.close();
  }
});

test('a stream whose reader stopped does not hold up the other streams of its connection, nor other connections', async () => {
  // Room for what the stalled streams hold (the default budget's 32 MiB and more): every read answer is served.
  const roomy = await edge(['--visitor-buffer-budget', '64'], 'roomy');
  const stalled = connect(roomy.server);
  const other = connect(roomy.server);
  try {
    // Four answers of 24 MiB on `stalled` that are never read: their stream windows stay shut.
    const stuck = Array.from({ length: 4 }, () => {
      const req = stalled.request({ ':path': '/big', ':authority': roomy.host });
      req.on('error', () => undefined);
      req.pause();
      req.end();
      return req;
    });
    await eventually(() => stuck.every((r) => !r.pending) || undefined, 10_000, 'the stalled requests are sent');
    const sameConnection = Array.from({ length: 8 }, () => fetchOutcome(stalled, roomy.host, '/1m', MiB));
    const otherConnection = Array.from({ length: 16 }, () => fetchOutcome(other, roomy.host, '/1m', MiB));
    const outcomes = await withDeadline(Promise.all([...sameConnection, ...otherConnection]), 30_000, 'the readers to get their answers');
    assert.equal(outcomes, Array(24).fill('whole'), 'every read answer came whole');
    assert.ok(stuck.every((r) => !r.closed), 'the stalled streams are still open (waiting for their reader)');
  } finally {
    stalled.destroy();
    other.destroy();
    await roomy.server.stop();
  }
});

test.run();
