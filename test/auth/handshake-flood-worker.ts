import { parentPort, workerData } from 'node:worker_threads';
import { generateKey } from '../../src/auth/key-format.js';
import { rawHandshake } from './raw-handshake.js';

// The flood of handshake-flood.test.ts, on a thread of its own: the test's thread then measures
// the legitimate keys' handshakes without waiting behind hundreds of the flood's socket events.
// Each loop sends handshakes with random keys from its address, one at a time, until told to
// stop; the answers are tallied per group of loops and posted every 100 ms and at the end.

export interface FloodPlan {
  port: number;
  /** tally name → the addresses of its loops (one loop per entry) */
  loops: Record<string, string[]>;
}
export type Tallies = Record<string, Record<number, number>>;

const plan = workerData as FloodPlan;
const tallies: Tallies = Object.fromEntries(Object.keys(plan.loops).map((k) => [k, {}]));
let stop = false;
const loops = Object.entries(plan.loops).flatMap(([name, froms]) =>
  froms.map(async (from) => {
    const tally = tallies[name]!;
    while (!stop) {
      const status = await rawHandshake(plan.port, from, generateKey().key);
      tally[status] = (tally[status] ?? 0) + 1;
    }
  }),
);
const progress = setInterval(() => parentPort!.postMessage({ tallies }), 100);
parentPort!.on('message', () => {
  stop = true;
  void Promise.all(loops).then(() => {
    clearInterval(progress);
    parentPort!.postMessage({ tallies, done: true });
    parentPort!.close();
  });
});
