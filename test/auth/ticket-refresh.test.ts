// A long-lived control connection gets fresh resumption tickets (Ticket frames) before the one
// in its Welcome runs out, so after days connected it still comes back to a restarted burrowd
// without a verification; a client that did not ask for them (an older one, which would close on
// an unknown frame) gets none. Tickets live 8 s here (--resume-ticket-ttl, tests only), a day
// in use.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, RESUME_HEADER, TICKET_REFRESH_HEADER, decodeFrame, encodeFrame, type Frame } from '../../src/protocol/frames.js';

const TTL_MS = 8_000;
const ARGS = ['--metrics-addr', '127.0.0.1:0', '--resume-ticket-ttl', String(TTL_MS)];
let first: TestServer;
let second: TestServer | null = null;

test.before(async () => {
  first = await startServer({ args: ARGS });
});

test.after(async () => {
  await second?.stop();
  await first?.stop().catch(() => null);
});

async function verifications(s: TestServer): Promise<number> {
  const port = Number(/metrics on http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(s.stdout())![1]);
  const text = await withDeadline(fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text()), 10_000, 'metrics');
  return Number(/^burrow_key_verifications_total (\d+)$/m.exec(text)![1]);
}

/** A control connection that said Hello: every frame it gets (Pings answered). */
async function connection(s: TestServer, key: string, headers: Record<string, string>): Promise<{ ws: WsClient; frames: Frame[] }> {
  const ws = await WsClient.connect(`${s.url}/tunnel/v1/connect`, { authorization: `Bearer ${key}`, ...headers }, MAX_FRAME_BYTES, 10_000);
  const frames: Frame[] = [];
  ws.on('message', (m: Uint8Array) => {
    const f = decodeFrame(m);
    if (f[0] === F.Ping) ws.send(encodeFrame([F.Pong, f[1]]));
    frames.push(f);
  });
  ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent: 'ticket-refresh-test' }]));
  return { ws, frames };
}

const expiryOf = (ticket: string): number => Number(ticket.split('.')[1]);

test("burrow's client asks for fresh tickets on its main connection and takes each one", async () => {
  const key = await createKeyFor(first, (await createUser(first)).id, { scopes: ['tunnels'] });
  const c = new TunnelClient({ server: first.url, token: key, type: 'tcp', local: { host: '127.0.0.1', port: 9 } });
  const tickets: string[] = [];
  c.on('ticket', (t) => tickets.push(t));
  try {
    await c.start();
    const two = async (): Promise<void> => {
      while (tickets.length < 2) await new Promise((r) => setTimeout(r, 20));
    };
    await withDeadline(two(), TTL_MS, 'a refreshed ticket');
    assert.ok(expiryOf(tickets[1]!) > expiryOf(tickets[0]!), `Welcome's, then a later one: ${tickets.join(' → ')}`);
  } finally {
    await c.stop();
  }
});

test('a connection that asked for them gets a fresh ticket before its ticket runs out; one that did not gets none', async () => {
  const key = await createKeyFor(first, (await createUser(first)).id, { scopes: ['tunnels'] });
  const asked = await connection(first, key, { [TICKET_REFRESH_HEADER]: '1' });
  const older = await connection(first, key, {});
  const t0 = performance.now();
  const welcome = async (c: { frames: Frame[] }): Promise<string> => {
    while (!c.frames.some((f) => f[0] === F.Welcome)) await new Promise((r) => setTimeout(r, 20));
    return (c.frames.find((f) => f[0] === F.Welcome)![1] as { resume: string }).resume;
  };
  const first0 = await withDeadline(welcome(asked), 10_000, 'Welcome');
  await withDeadline(welcome(older), 10_000, 'Welcome (older client)');
  const ticketFrame = async (): Promise<string> => {
    while (!asked.frames.some((f) => f[0] === F.Ticket)) await new Promise((r) => setTimeout(r, 20));
    return (asked.frames.find((f) => f[0] === F.Ticket)![1] as { resume: string }).resume;
  };
  const fresh = await withDeadline(ticketFrame(), TTL_MS, 'a Ticket frame');
  const ms = performance.now() - t0;
  assert.ok(ms > TTL_MS / 2 - 1_000 && ms < TTL_MS, `the refresh came ${Math.round(ms)} ms in, at half the ticket's life`);
  assert.ok(expiryOf(fresh) > expiryOf(first0), `a later expiry: ${first0} → ${fresh}`);
  await new Promise((r) => setTimeout(r, 300));
  assert.not.ok(older.frames.some((f) => f[0] === F.Ticket), 'no Ticket frame to a client that did not ask');
  assert.not.ok(older.ws.isClosed, 'the older client stays connected');
  asked.ws.close();
  older.ws.close();

  // The fresh ticket is worth a verification on a restarted server.
  await first.stop({ keepDatabase: true });
  second = await startServer({ db: first.db, args: ['--port', String(first.port), ...ARGS] });
  const back = await connection(second, key, { [RESUME_HEADER]: fresh });
  await withDeadline(welcome(back), 10_000, 'Welcome after the restart');
  back.ws.close();
  assert.is(await verifications(second), 0, 'no argon2id run for the key resumed with its refreshed ticket');
});

test.run();
