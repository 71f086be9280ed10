// How busy the machine was during a measurement, and how much of that was not ours.
// On a small shared box (2 cores, other jobs running tests) a figure measured while something
// else burned a core is not comparable; each measurement records the "background" share so a
// reader can tell, and the harness waits for a calm machine before starting one.
//
//   ours = harness (incl. reaped children such as finished wrk runs: cutime/cstime)
//        + every live process it started and their descendants (incl. their reaped children)
//   background = all busy CPU time − ours
import { readFileSync } from 'node:fs';
import { descendants, sleep } from './procs.js';

interface Snapshot {
  busyTicks: number;
  totalTicks: number;
  oursTicks: number;
}

function systemTicks(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!; // "cpu  user nice system idle iowait irq softirq steal ..."
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  // user + nice + system only: loopback traffic is processed largely in softirq time that no
  // process is charged for, so counting irq/softirq as busy would call our own traffic
  // "background".
  return { busy: f[0]! + f[1]! + f[2]!, total };
}

/** User and system ticks of a process: every thread's, and its reaped children's. */
function procSplitTicks(pid: number | 'self'): { user: number; system: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // After ")": state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14)
    return { user: Number(f[11]) + Number(f[13]), system: Number(f[12]) + Number(f[14]) };
  } catch {
    return { user: 0, system: 0 };
  }
}

function procTicks(pid: number | 'self'): number {
  const t = procSplitTicks(pid);
  return t.user + t.system;
}

/** CPU time (user + system, reaped children included) of these processes, in microseconds. */
export function cpuMicros(pids: number[]): number {
  const t = cpuSplitMicros(pids);
  return t.user + t.system;
}

/** cpuMicros() split into user and system time. */
export function cpuSplitMicros(pids: number[]): { user: number; system: number } {
  let user = 0;
  let system = 0;
  for (const pid of pids) {
    const t = procSplitTicks(pid);
    user += t.user;
    system += t.system;
  }
  return { user: user * (1e6 / CLOCK_TICKS_PER_SEC), system: system * (1e6 / CLOCK_TICKS_PER_SEC) };
}

/** USER_HZ: /proc reports CPU time in these ticks (100 on every Linux this runs on). */
const CLOCK_TICKS_PER_SEC = 100;

function oursTicks(): number {
  let t = procTicks('self');
  for (const pid of descendants(process.pid)) t += procTicks(pid);
  return t;
}

function snapshot(): Snapshot {
  const s = systemTicks();
  return { busyTicks: s.busy, totalTicks: s.total, oursTicks: oursTicks() };
}

export interface CpuShare {
  /** Percent of all cores busy. */
  busyPct: number;
  /** Percent of all cores busy with processes that are not the harness's. */
  backgroundPct: number;
}

export function cpuWindow(): { end(): CpuShare } {
  const a = snapshot();
  return {
    end() {
      const b = snapshot();
      const total = b.totalTicks - a.totalTicks || 1;
      const busy = b.busyTicks - a.busyTicks;
      const ours = b.oursTicks - a.oursTicks;
      return {
        busyPct: (100 * busy) / total,
        backgroundPct: Math.max(0, (100 * (busy - ours)) / total),
      };
    },
  };
}

/** Background CPU above which a measurement is delayed (and flagged if it cannot wait it out). */
export const CALM_BACKGROUND_PCT = 15;

/**
 * Waits (at most maxWaitMs) until one second passes with background CPU under
 * CALM_BACKGROUND_PCT. Returns the last background figure seen.
 */
export async function waitForCalm(maxWaitMs: number): Promise<number> {
  const deadline = Date.now() + maxWaitMs;
  for (;;) {
    const w = cpuWindow();
    await sleep(1_000);
    const { backgroundPct } = w.end();
    if (backgroundPct < CALM_BACKGROUND_PCT || Date.now() >= deadline) return backgroundPct;
  }
}
