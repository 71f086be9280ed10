// Resumption tickets (src/auth/resume-ticket.ts): a restarted burrowd takes its clients back
// without an argon2id verification of their keys, and a ticket is worth nothing without its own
// key, once tampered with, past its expiry, or once its key is revoked. Real servers on one
// database; the verifications are counted by burrow_key_verifications_total.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';
import { keyDigest, keyPrefixOf } from '../../src/auth/key-format.js';
import { TicketBox } from '../../src/auth/resume-ticket.js';
import { WsClient, WsRefused } from '../../src/protocol/ws-client.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, RESUME_HEADER, decodeFrame, encodeFrame, type Frame } from '../../src/protocol/frames.js';

const METRICS = ['--metrics-addr', '127.0.0.1:0'];
let first: TestServer;
let second: TestServer | null = null;

test.before(async () => {
  first = await startServer({ args: METRICS });
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

/** A control handshake with `key` (and `ticket`) and a Hello: Welcome's ticket; the connection is closed after. */
async function handshake(s: TestServer, key: string, ticket?: string): Promise<string> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...(ticket === undefined ? {} : { [RESUME_HEADER]: ticket }) };
  const ws = await WsClient.connect(`${s.url}/tunnel/v1/connect`, headers, MAX_FRAME_BYTES, 10_000);
  const welcome = new Promise<Frame>((resolve) => ws.once('message', (m: Uint8Array) => resolve(decodeFrame(m))));
  ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent: 'resume-test' }]));
  const w = await withDeadline(welcome, 10_000, 'Welcome');
  ws.close();
  assert.is(w[0], F.Welcome);
  return (w[1] as { resume: string }).resume;
}

async function refusedStatus(s: TestServer, key: string, ticket: string): Promise<number> {
  try {
    await handshake(s, key, ticket);
    return 101;
  } catch (err) {
    if (err instanceof WsRefused) return err.status;
    throw err;
  }
}

test('a ticket stands for its own key, unexpired and untampered, and nothing else', () => {
  const box = new TicketBox(Buffer.alloc(32, 7));
  const key = 'bk_AAAAAAAAAAAA_' + 'b'.repeat(43);
  const other = 'bk_AAAAAAAAAAAA_' + 'c'.repeat(43);
  const prefix = keyPrefixOf(key)!;
  const now = Date.now();
  const t = box.issue(prefix, keyDigest(key), now + 60_000);
  assert.ok(box.check(t, prefix, keyDigest(key), now));
  assert.not.ok(box.check(t, prefix, keyDigest(other), now), 'another key of the same prefix');
  assert.not.ok(box.check(t, 'bk_BBBBBBBBBBBB', keyDigest(key), now), 'another prefix');
  assert.not.ok(box.check(t, prefix, keyDigest(key), now + 60_001), 'expired');
  assert.not.ok(new TicketBox(Buffer.alloc(32, 8)).check(t, prefix, keyDigest(key), now), 'another server secret');
  const [v, expiry, mac] = t.split('.');
  assert.not.ok(box.check(`${v}.${Number(expiry) + 3600}.${mac}`, prefix, keyDigest(key), now), 'a later expiry written in');
  assert.not.ok(box.check(`${v}.${expiry}.${mac!.startsWith('A') ? 'B' : 'A'}${mac!.slice(1)}`, prefix, keyDigest(key), now), 'a changed MAC');
  // The last character's 2 spare bits: another spelling of the same MAC is not the ticket.
  const last = mac!.at(-1)!;
  const sameBits = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'.split('').find((c) => c !== last && Buffer.from(`${mac!.slice(0, -1)}${c}`, 'base64url').equals(Buffer.from(mac!, 'base64url')))!;
  assert.not.ok(box.check(`${v}.${expiry}.${mac!.slice(0, -1)}${sameBits}`, prefix, keyDigest(key), now), 'a non-canonical spelling of the MAC');
  for (const junk of ['', 'v1', 'v2.1.x', `${t}x`, 'v1.1.' + 'a'.repeat(200), 'v1.-1.' + 'a'.repeat(43)]) assert.not.ok(box.check(junk, prefix, keyDigest(key), now), junk);
});

test('clients of a restarted server come back with their tickets: their keys are not verified again', async () => {
  const keys = await Promise.all([1, 2, 3].map(async () => createKeyFor(first, (await createUser(first)).id, { scopes: ['tunnels'] })));
  const tickets = await Promise.all(keys.map((k) => handshake(first, k)));
  assert.ok((await verifications(first)) >= keys.length, 'the first handshakes verified each key');
  await first.stop({ keepDatabase: true });
  second = await startServer({ db: first.db, args: ['--port', String(first.port), ...METRICS] });
  const renewed = await Promise.all(keys.map((k, i) => handshake(second!, k, tickets[i])));
  assert.is(await verifications(second), 0, 'no argon2id run for a resumed key');
  assert.ok(renewed.every((t) => /^v1\.\d+\.[A-Za-z0-9_-]{43}$/.test(t)), 'a fresh ticket each');
});

test("another key's ticket, or a tampered one, is ignored: the key is verified as usual", async () => {
  const s = second!;
  const [a, b] = await Promise.all([1, 2].map(async () => createKeyFor(s, (await createUser(s)).id, { scopes: ['tunnels'] })));
  const before = await verifications(s);
  const ticketA = await handshake(s, a!);
  assert.is(await verifications(s), before + 1);
  await handshake(s, b!, ticketA);
  assert.is(await verifications(s), before + 2, "B with A's ticket was verified");
  // Junk in the header, long or not ticket-shaped: ignored, the key verified as usual.
  await handshake(s, b!, 'v1.9999999999.' + '\u00ff'.repeat(43));
  await handshake(s, b!, 'x'.repeat(4000));
  const wrong = await createKeyFor(s, (await createUser(s)).id, { scopes: ['tunnels'] });
  const forged = `${wrong.slice(0, 16)}${'x'.repeat(43)}`;
  assert.is(await refusedStatus(s, forged, ticketA), 401, 'a guessed key with a stolen ticket');
});

test('a revoked key is refused with its ticket', async () => {
  const s = second!;
  const key = await createKeyFor(s, (await createUser(s)).id, { scopes: ['tunnels'] });
  const ticket = await handshake(s, key);
  await s.stop({ keepDatabase: true });
  await s.sql`update api_keys set revoked_at = now() where key_prefix = ${keyPrefixOf(key)}`;
  second = await startServer({ db: s.db, args: ['--port', String(s.port), ...METRICS] });
  assert.is(await refusedStatus(second, key, ticket), 401);
});

test.run();
