import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MessageChannel, Worker } from 'node:worker_threads';
import { Mailbox, mailboxOfWorker } from '../actors/actor.js';
import type { MainToShard, ShardToMain } from '../protocol/messages.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { ShardWorkerData } from '../workers/shard-worker.js';

/**
 * Young generation of each shard's V8 heap (two semi-spaces of 4 MiB and the large-object
 * space beside them). V8 grows it to 48 MiB under load and keeps the pages: a minute after a
 * churn of tunnels under load, a 2-shard burrowd held 74 % more than before it, and 27 % with
 * this cap (bench/results/2026-11-26-churn.md). The http bench moved within its noise: a
 * scavenge costs what survives it, not the size of the space.
 */
const SHARD_YOUNG_GENERATION_MB = 12;

//   ShardSupervisor (main thread)
//     ├── shard 0  Worker(shard-worker.js)  ── Mailbox ──┐
//     ├── shard 1  …                                      ├── full mesh of MessagePorts
//     └── shard N-1                                        ┘   (rebuilt for a restarted shard)
//
// Restart policy: a shard that exits unexpectedly is restarted after a short backoff,
// within a budget (MAX_RESTARTS per RESTART_WINDOW_MS); past the budget the server stops
// rather than flap. Supervision is data: the policy is these constants.

const MAX_RESTARTS = 10;
const RESTART_WINDOW_MS = 60_000;
const RESTART_BACKOFF_MS = [0, 100, 500, 1000, 2000];
const READY_TIMEOUT_MS = 30_000;

interface Shard {
  index: number;
  worker: Worker;
  mailbox: Mailbox<MainToShard, ShardToMain>;
  ready: boolean;
  stopping: boolean;
}

export interface ShardEvents {
  /** Every non-`ready` message from a shard; the return value answers asks. */
  onMessage(shard: number, msg: Exclude<ShardToMain, { type: 'ready' }>): unknown;
  onShardDown(shard: number): void;
  onGiveUp(reason: string): void;
}

export class ShardSupervisor {
  private readonly shards: (Shard | undefined)[] = [];
  private readonly restarts: number[] = [];
  private port = 0;
  /** Shard i's uWS App (the management API) listens on apiPaths[i], behind its front. */
  private apiPaths: string[] = [];
  private stopping = false;

  constructor(
    private readonly config: Config,
    private readonly databaseUrl: string,
    private readonly log: Logger,
    private readonly events: ShardEvents,
  ) {}

  /** Starts every shard on the one (fixed) port; they share it through SO_REUSEPORT. */
  async start(port: number, apiPaths: string[]): Promise<number> {
    this.port = port;
    this.apiPaths = apiPaths;
    await Promise.all(Array.from({ length: this.config.workers }, (_, i) => this.spawn(i, port, true)));
    return this.port;
  }

  get total(): number {
    return this.config.workers;
  }

  get up(): number {
    return this.shards.filter((s) => s?.ready).length;
  }

  tell(index: number, msg: MainToShard): void {
    this.shards[index]?.mailbox.tell(msg);
  }

  ask<R>(index: number, msg: MainToShard, timeoutMs: number): Promise<R> {
    const s = this.shards[index];
    if (!s) return Promise.reject(new Error(`shard ${index} is not running`));
    return s.mailbox.ask<R>(msg, timeoutMs);
  }

  /** Asks every live shard; resolves when all answered. A shard that dies meanwhile loses its state anyway. */
  async askAll(msg: MainToShard, timeoutMs: number): Promise<void> {
    await Promise.all(
      this.shards.filter((s): s is Shard => !!s?.ready).map((s) =>
        s.mailbox.ask(msg, timeoutMs).catch((err) => {
          if (this.shards[s.index] === s && s.ready) throw err;
        }),
      ),
    );
  }

  broadcast(msg: MainToShard): void {
    for (const s of this.shards) if (s?.ready) s.mailbox.tell(msg);
  }

  /** Drains every shard (stop accepting, finish in-flight), then lets the threads end. */
  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    const live = this.shards.filter((s): s is Shard => !!s);
    await Promise.all(
      live.map(async (s) => {
        s.stopping = true;
        try {
          await s.mailbox.ask({ type: 'drain', timeoutMs }, timeoutMs + 5_000);
        } catch (err) {
          this.log.warn({ err, shard: s.index }, 'shard did not drain in time');
        }
        s.mailbox.close();
        await s.worker.terminate();
      }),
    );
  }

  private spawn(index: number, port: number, first = false): Promise<number> {
    const data: ShardWorkerData = { index, config: this.config, databaseUrl: this.databaseUrl, port, apiPath: this.apiPaths[index]! };
    const worker = new Worker(new URL('../workers/shard-worker.js', import.meta.url), {
      workerData: data,
      name: `shard-${index}`,
      resourceLimits: { maxYoungGenerationSizeMb: SHARD_YOUNG_GENERATION_MB },
    });
    const mailbox = mailboxOfWorker<MainToShard, ShardToMain>(worker);
    const shard: Shard = { index, worker, mailbox, ready: false, stopping: false };
    this.shards[index] = shard;
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`shard ${index} did not start within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
      mailbox.handle((msg) => {
        if (msg.type === 'ready') {
          clearTimeout(timer);
          shard.ready = true;
          this.connectMesh(shard);
          resolve(msg.port);
          return {};
        }
        return this.events.onMessage(index, msg);
      });
      worker.on('error', (err) => this.log.error({ err, shard: index }, 'shard thread threw'));
      worker.on('exit', (code) => {
        clearTimeout(timer);
        mailbox.close(`shard ${index} exited`);
        if (this.shards[index] === shard) this.shards[index] = undefined;
        if (!shard.ready) reject(new Error(`shard ${index} exited with code ${code} before it was ready`));
        if (shard.stopping || this.stopping) return;
        this.log.error({ shard: index, code }, 'shard exited unexpectedly; restarting');
        this.events.onShardDown(index);
        this.restart(index);
      });
    });
  }

  private restart(index: number): void {
    const now = Date.now();
    while (this.restarts.length && now - this.restarts[0]! > RESTART_WINDOW_MS) this.restarts.shift();
    if (this.restarts.length >= MAX_RESTARTS) {
      this.events.onGiveUp(`${MAX_RESTARTS} shard restarts within ${RESTART_WINDOW_MS / 1000} s`);
      return;
    }
    const delay = RESTART_BACKOFF_MS[Math.min(this.restarts.length, RESTART_BACKOFF_MS.length - 1)]!;
    this.restarts.push(now);
    setTimeout(() => {
      if (this.stopping) return;
      this.spawn(index, this.port).then(
        () => this.log.info({ shard: index }, 'shard restarted'),
        // Its exit handler already scheduled the next attempt (within the budget).
        (err) => this.log.error({ err, shard: index }, 'shard restart failed'),
      );
    }, delay);
  }

  /** Gives a (re)started shard a MessagePort to every other live shard. */
  private connectMesh(shard: Shard): void {
    for (const other of this.shards) {
      if (!other || other === shard || !other.ready) continue;
      const { port1, port2 } = new MessageChannel();
      shard.mailbox.attach('peer', port1, { shard: other.index });
      other.mailbox.attach('peer', port2, { shard: shard.index });
    }
  }
}

/**
 * The shards' API sockets, in a directory only this user can enter (a local process must not
 * forge client addresses with a PROXY header): one path per shard, and `remove` for the end.
 */
export function shardSockets(workers: number): { paths: string[]; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'burrowd-api-'));
  return {
    paths: Array.from({ length: workers }, (_, i) => join(dir, `shard-${i}.sock`)),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
