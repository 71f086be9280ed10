import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually } from '../helpers/deadline.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { WsClient, WsRefused } from '../../src/protocol/ws-client.js';
import { MAX_FRAME_BYTES } from '../../src/protocol/frames.js';

// --max-connections-per-user: one user's control connections over every shard are bounded (a
// key could otherwise hold hundreds, each with its buffers); past the bound the handshake gets
// 429 before any upgrade, other users are not affected, and a closed connection frees its seat.

let server: TestServer;

test.before(async () => {
  server = await startServer({ args: ['--max-connections-per-user', '2'] });
});

test.after(async () => {
  await server?.stop();
});

const connect = (key: string): Promise<WsClient> => WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 5_000);

test('the third control connection of a user is refused with 429; another user connects; a close frees a seat', async () => {
  const a = await connect(server.adminKey);
  const b = await connect(server.adminKey);
  const third = await connect(server.adminKey).then(
    (ws) => {
      ws.destroy();
      return null;
    },
    (err: unknown) => err,
  );
  assert.ok(third instanceof WsRefused, String(third));
  assert.is((third as WsRefused).status, 429);
  assert.match((third as WsRefused).body, /max-connections-per-user/);

  const other = await createUser(server);
  const otherKey = await createKeyFor(server, other.id, { scopes: ['tunnels'] });
  const theirs = await connect(otherKey);
  theirs.destroy();

  a.destroy();
  const again = await eventually(async () => connect(server.adminKey).catch(() => null), 5_000, 'a seat after a close');
  again!.destroy();
  b.destroy();
});

test.run();
