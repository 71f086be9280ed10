import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MessageChannel } from 'node:worker_threads';
import { Mailbox, type PortLike } from '../../src/actors/actor.js';
import type { KeyVerdict, MainToShard, ShardToMain } from '../../src/protocol/messages.js';
import type { TunnelAdmitted, TunnelRoute } from '../../src/protocol/tunnel-messages.js';

// Mailbox.ask takes its reply type from the channel's request → reply map
// (protocol/messages.ts), by msg.type: these checks are the compiler's (tsc fails the build
// when one is wrong); the runtime test only shows the typed channel works end to end.

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const same = <A, B>(ok: Equal<A, B>): boolean => ok;

function shardEnd() {
  const { port1, port2 } = new MessageChannel();
  const shard = new Mailbox<ShardToMain, MainToShard>(port1 as unknown as PortLike);
  const main = new Mailbox<MainToShard, ShardToMain>(port2 as unknown as PortLike);
  return { shard, main, close: () => (port1.close(), port2.close()) };
}

test('ask infers the reply type from msg.type, on both channels', async () => {
  const { shard, main, close } = shardEnd();
  main.handle((m) => {
    if (m.type === 'verify-key') return { verdict: 'valid' } satisfies KeyVerdict;
    if (m.type === 'tunnel-routes') return { routes: [{ id: 'a', shard: 1, sessionId: 's', access: null }], nodes: null } satisfies { routes: TunnelRoute[]; nodes: string[] | null };
    return undefined;
  });
  shard.handle((m) => (m.type === 'drain' ? { idle: true } : undefined));

  const verdict = shard.ask({ type: 'verify-key', ip: '127.0.0.1', prefix: 'p', hash: null, secret: 's' }, 1000);
  assert.ok(same<typeof verdict, Promise<KeyVerdict>>(true));
  const routes = shard.ask({ type: 'tunnel-routes' }, 1000);
  assert.ok(same<typeof routes, Promise<{ routes: TunnelRoute[]; nodes: string[] | null }>>(true));
  const admit = (): Promise<TunnelAdmitted> =>
    shard.ask(
      { type: 'tunnel-admit', userId: 'u', keyId: 'k', tunnelType: 'http', id: null, teamId: null, remotePort: null, clientIp: null, access: null, claim: null, local: null, pool: false, member: null },
      1000,
    );
  void admit;
  const drained = main.ask({ type: 'drain', timeoutMs: 10 }, 1000);
  assert.ok(same<typeof drained, Promise<{ idle: boolean }>>(true));

  // A caller cannot claim another reply type for a message of the map …
  // @ts-expect-error verify-key answers KeyVerdict, not a string
  const wrong: Promise<string> = shard.ask({ type: 'verify-key', ip: '', prefix: '', hash: null, secret: '' }, 1000);
  void wrong.catch(() => undefined);
  // … a tell-only message has no reply type (only the deprecated explicit-type overload, kept
  // for call sites not yet moved, still takes it: removing it makes this a compile error) …
  const told = shard.ask({ type: 'tunnel-down', id: 'x', sessionId: 's', last: null }, 10);
  assert.ok(same<typeof told, Promise<unknown>>(true));
  void told.catch(() => undefined);
  // … and a message keeps its exact shape (no excess properties through the inference).
  // @ts-expect-error `bogus` is not a field of tunnel-routes
  void shard.ask({ type: 'tunnel-routes', bogus: 1 }, 10).catch(() => undefined);

  assert.equal(await verdict, { verdict: 'valid' });
  assert.is((await routes).routes[0]!.shard, 1);
  assert.equal(await drained, { idle: true });
  close();
});

test.run();
