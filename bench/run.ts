// burrow's benchmark harness: `npm run bench -- <scenario|all> [flags]`.
//
// Every scenario measures its targets in the same run — direct (the load tool straight at
// the origin), burrow, `ssh -R` (OpenSSH as the peer) and, for HTTP, node-proxy (a plain
// node:http reverse proxy: the floor) — prints a table with ratios, and
// writes bench/results/<date>-<scenario>.{json,md} with the environment it ran on.
// Everything stays on loopback; every process started is ended on exit, error or Ctrl-C.
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { perfStatWorks } from './lib/probes.js';
import { formatPerfSummary, summarizePerf } from './lib/perf-summary.js';
import { cleanup, killAllNow } from './lib/procs.js';
import { ensureTools, type Tool } from './lib/tools.js';
import { environment } from './lib/env.js';
import { markdown, writeResult, type ScenarioResult } from './lib/report.js';
import { openTargets, type Context, type Scenario, type Settings } from './lib/context.js';
import { benchCertificate } from './lib/tls.js';
import { DEFAULT_TARGETS, HTTP_ONLY_TARGETS, TARGET_NAMES, type TargetName } from './targets/target.js';
import { httpScenario, httpsScenario } from './scenarios/http.js';
import { tcpScenario } from './scenarios/tcp.js';
import { idleScenario } from './scenarios/idle.js';
import { holScenario } from './scenarios/hol.js';
import { churnScenario } from './scenarios/churn.js';
import { weightScenario } from './scenarios/weight.js';
import { clusterScenario } from './scenarios/cluster.js';
import { h2Scenario } from './scenarios/h2.js';

const SCENARIOS: Scenario[] = [httpScenario, httpsScenario, tcpScenario, idleScenario, weightScenario, holScenario, churnScenario, clusterScenario, h2Scenario];
const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

const USAGE = `usage: npm run bench -- <scenario> [flags]

scenarios:
${SCENARIOS.map((s) => `  ${s.name.padEnd(6)} ${s.summary}`).join('\n')}
  all    every scenario above, in turn

flags:
  --duration SECS      seconds per measurement (default 10)
  --warmup SECS        unrecorded warm-up before each measurement (default 2)
  --connections LIST   keep-alive connection counts for http and https (default 1,64,256)
  --h2-connections LIST h2: h2load connections (default 1,16), each with --streams streams
  --streams N          h2: concurrent streams per h2load connection (default 64; burrowd allows 100)
  --calls LIST         h2: concurrent gRPC unary calls on one channel (default 1,64)
  --counts LIST        idle tunnels / connections for idle (default 1000,10000)
  --worker-counts LIST weight: burrowd --workers values, a fresh burrowd each (default 1,2,4);
                       per-shard cost is (largest − smallest) ÷ their difference
  --churn-secs SECS    churn: seconds of connect / load / disconnect cycles (default 60)
  --after-secs SECS    churn: RSS is taken this long after the last cycle (default 60)
  --threads N          wrk (h2load) threads, capped at the connection count (default 1)
  --targets LIST       any of direct,burrow,burrow1,burrow-mesh,relay,node-proxy,ssh (default
                       direct,burrow,relay,node-proxy,ssh); relay is the bare Node tunnel (an
                       edge and a client, 9-byte frames: the floor under burrowd and the CLI);
                       burrow1 is burrowd with --workers 1, beside
                       burrow: adds a burrow/1 shard ratio; burrow-mesh is burrow with a client
                       that opens no lanes (--no-lanes): adds a burrow/no lanes ratio; node-proxy (a plain node:http reverse
                       proxy, the floor) and relay are HTTP only: http, https and hol measure them,
                       tcp, idle and churn leave them out (https leaves the relay out too: it
                       reads plain HTTP); h2 measures rows of its own (direct, nginx as an
                       h2 → HTTP/1.1 proxy, burrow) whatever --targets says
  --origin nginx|node  HTTP origin (default nginx, falls back to node when nginx is missing)
  --workers N          burrowd --workers for the burrow target (default: burrowd's own default,
                       the CPU count)
  --repeat N           rounds per measurement, interleaved across targets; the median run
                       (by the first metric: req/s, Gbit/s, p50) is reported (default 1)
  --calm-wait SECS     wait up to this long for other processes to leave the CPU before each
                       measurement (default 20); runs that still shared it are flagged
  --database-url URL   burrowd --database-url (default: the embedded database in a temp dir)
  --cpu-prof           V8 CPU profiles of burrowd (every thread) and the burrow clients into
                       bench/profiles/<time>-<scenario>/ (open in Chrome DevTools)
  --perf               http, https: perf record -g (cpu-clock) of burrowd, the CLI and the relay,
                       node started with --perf-basic-prof, for ${5} s of wrk after the measured run
                       of GET 14 B at the first connection count >= 64; a summary by category
                       (kernel, GC, V8 runtime, JIT code, builtins, compiler) per process in
                       bench/profiles/<time>-<scenario>/perf-summary.txt (system calls are not
                       counted in that run)
  --no-probes          http, https: run the Node targets without --trace-gc and perf stat (their
                       GC % and syscalls rows read n/a); the probes cost burrow about 13 % of
                       its req/s, so throughput comparisons with older results want this
  --no-install         never run apt-get; print what to install instead
  --no-write           print the table only, do not write bench/results/

examples:
  npm run bench -- http
  npm run bench -- https --connections 1,64
  npm run bench -- tcp --duration 5
  npm run bench -- all --targets direct,ssh
  npm run bench -- http --targets direct,node-proxy,burrow
  npm run bench -- h2 --duration 5`;

function list(v: string, what: string): number[] {
  const out = v.split(',').map(Number);
  if (out.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--${what}: expected positive integers separated by commas, got "${v}"`);
  return out;
}

function positive(v: string, what: string, min = 1, max = 3600): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${what}: expected an integer in ${min}..${max}, got "${v}"`);
  return n;
}

function parse(argv: string[]): { scenarios: Scenario[]; settings: Settings; targetsNamed: boolean; install: boolean; write: boolean } {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      duration: { type: 'string', default: '10' },
      warmup: { type: 'string', default: '2' },
      connections: { type: 'string', default: '1,64,256' },
      'h2-connections': { type: 'string', default: '1,16' },
      streams: { type: 'string', default: '64' },
      calls: { type: 'string', default: '1,64' },
      counts: { type: 'string', default: '1000,10000' },
      'worker-counts': { type: 'string', default: '1,2,4' },
      'churn-secs': { type: 'string', default: '60' },
      'after-secs': { type: 'string', default: '60' },
      threads: { type: 'string', default: '1' },
      targets: { type: 'string' },
      origin: { type: 'string', default: 'nginx' },
      workers: { type: 'string' },
      'database-url': { type: 'string' },
      'cpu-prof': { type: 'boolean', default: false },
      perf: { type: 'boolean', default: false },
      'no-probes': { type: 'boolean', default: false },
      'calm-wait': { type: 'string', default: '20' },
      repeat: { type: 'string', default: '1' },
      'no-install': { type: 'boolean', default: false },
      'no-write': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help || positionals.length !== 1) {
    console.log(USAGE);
    process.exit(values.help ? 0 : 2);
  }
  const name = positionals[0]!;
  const scenarios = name === 'all' ? SCENARIOS : SCENARIOS.filter((s) => s.name === name);
  if (scenarios.length === 0) throw new Error(`unknown scenario "${name}"\n\n${USAGE}`);
  const targets = (values.targets ?? DEFAULT_TARGETS.join(',')).split(',') as TargetName[];
  const bad = targets.filter((t) => !TARGET_NAMES.includes(t));
  if (bad.length) throw new Error(`--targets: unknown ${bad.join(', ')} (choose from ${TARGET_NAMES.join(', ')})`);
  if (values.origin !== 'nginx' && values.origin !== 'node') throw new Error(`--origin: nginx or node, got "${values.origin}"`);
  const counts = list(values.counts, 'counts');
  // Each idle connection costs several file descriptors across the processes involved; the
  // default hard limit here is 20000, so 10k is the bound.
  if (counts.some((c) => c > 10_000)) throw new Error('--counts: at most 10000 (file-descriptor bound)');
  return {
    scenarios,
    targetsNamed: values.targets !== undefined,
    install: !values['no-install'],
    write: !values['no-write'],
    settings: {
      durationSecs: positive(values.duration, 'duration'),
      warmupSecs: positive(values.warmup, 'warmup', 0, 60),
      threads: positive(values.threads, 'threads', 1, 64),
      connections: list(values.connections, 'connections'),
      h2Connections: list(values['h2-connections'], 'h2-connections'),
      // burrowd's --h2-max-streams is 100 by default: more would be refused, not measured.
      h2Streams: positive(values.streams, 'streams', 1, 100),
      grpcCalls: list(values.calls, 'calls'),
      idleCounts: counts,
      weightWorkers: list(values['worker-counts'], 'worker-counts'),
      churnSecs: positive(values['churn-secs'], 'churn-secs'),
      afterSecs: positive(values['after-secs'], 'after-secs', 0),
      origin: values.origin,
      targets,
      repeat: positive(values.repeat, 'repeat', 1, 15),
      calmWaitSecs: positive(values['calm-wait'], 'calm-wait', 0, 600),
      burrowDatabaseUrl: values['database-url'],
      cpuProfDir: values['cpu-prof'] ? join(repoRoot, 'bench', 'profiles', `${new Date().toISOString().replace(/[:.]/g, '-')}-${name}`) : undefined,
      perfDir: values.perf ? join(repoRoot, 'bench', 'profiles', `${new Date().toISOString().replace(/[:.]/g, '-')}-${name}-perf`) : undefined,
      noProbes: values['no-probes'],
      burrowWorkers: values.workers === undefined ? undefined : positive(values.workers, 'workers', 1, 256),
    },
  };
}

async function runScenario(scenario: Scenario, allSettings: Settings, targetsNamed: boolean, install: boolean, write: boolean): Promise<void> {
  // HTTP-only targets (node-proxy) in scenarios that expose TCP or hold idle tunnels: left out,
  // with a line in the results when --targets named them.
  // The relay reads plain HTTP/1.1 at its edge and has no TLS: https leaves it out too.
  const plainHttpOnly = (t: TargetName) => scenario.tls === true && t === 'relay';
  const leftOut = allSettings.targets.filter((t) => (!scenario.httpOnlyTargets && HTTP_ONLY_TARGETS.includes(t)) || plainHttpOnly(t));
  // The http scenarios read system calls and GC of the Node targets' processes (lib/probes.ts),
  // and --perf records them.
  // --no-probes: no --trace-gc and no perf stat (they cost burrow about 13 % of its req/s).
  const probed = (scenario.name === 'http' || scenario.name === 'https') && !(allSettings.noProbes && !allSettings.perfDir);
  const perfDir = probed ? allSettings.perfDir : undefined;
  const settings: Settings = {
    ...allSettings,
    targets: allSettings.targets.filter((t) => !leftOut.includes(t)),
    perfDir,
    probes: probed ? { traceGc: !allSettings.noProbes, syscalls: !allSettings.noProbes && !perfDir && perfStatWorks(), perfDir } : undefined,
  };
  if (settings.cpuProfDir) mkdirSync(settings.cpuProfDir, { recursive: true });
  if (perfDir) mkdirSync(perfDir, { recursive: true });
  const missingOptional: Tool[] = ensureTools(scenario.required, scenario.optional, install);
  if (missingOptional.length) console.error(`bench: without ${missingOptional.join(', ')} (optional) — using fallbacks`);
  const env = environment(repoRoot);
  console.error(`bench: ${scenario.name} — ${env.cores} cores, ${env.cpuModel}, Node ${env.node}, burrow ${env.burrowCommit}`);
  const opened: Pick<Context, 'targets' | 'info'> = scenario.opensOwnTargets ? { targets: [], info: {} } : await openTargets(settings, repoRoot, scenario.tls ? await benchCertificate() : undefined);
  if (targetsNamed) {
    for (const t of leftOut) {
      opened.info[t] = { unavailable: plainHttpOnly(t) ? 'plain HTTP only (no TLS at its edge): measured by http and hol, not by https' : `an HTTP ${t === 'relay' ? 'relay' : 'reverse proxy'}: measured by http, https and hol, not by ${scenario.name}` };
      console.error(`bench: ${t} not available: ${opened.info[t]!.unavailable}`);
    }
  }
  const ctx = { settings, repoRoot, ...opened };
  try {
    const out = await scenario.run(ctx);
    const result: ScenarioResult = {
      scenario: scenario.name,
      environment: env,
      settings: {
        ...(['idle', 'churn', 'weight'].includes(scenario.name) ? {} : { 'duration per measurement': `${settings.durationSecs} s (after ${settings.warmupSecs} s warm-up)` }),
        ...(['http', 'https', 'hol'].includes(scenario.name) ? { 'wrk threads': settings.threads } : {}),
        ...(scenario.name === 'idle' ? {} : { rounds: settings.repeat > 1 ? `${settings.repeat}, median reported` : 1 }),
        ...(out.settings ?? {}),
        'burrowd --workers': settings.burrowWorkers ?? 'default (CPU count)',
        'burrowd database': settings.burrowDatabaseUrl ? 'PostgreSQL (--database-url)' : 'embedded (PostgreSQL child in --data-dir)',
      },
      targets: { ...ctx.info, ...out.targets },
      measurements: out.measurements,
      notMeasured: out.notMeasured,
      table: out.table,
      tableNote: out.tableNote,
    };
    // A scenario that starts its own burrowd says how (weight: several --workers): its word
    // replaces the run-wide lines above, in place.
    Object.assign(result.settings, out.settings);
    const md = markdown(result);
    console.log(`\n${md}`);
    if (write) console.error(`bench: wrote ${writeResult(repoRoot, result).join(', ')}`);
  } finally {
    await Promise.all(ctx.targets.map((t) => t.close()));
    if (settings.cpuProfDir) console.error(`bench: CPU profiles in ${settings.cpuProfDir}`);
    if (perfDir) writePerfSummary(perfDir);
  }
}

/** perf record files of a run (written when their processes ended) → perf-summary.txt beside them. */
function writePerfSummary(dir: string): void {
  const parts: string[] = [];
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.perf.data')).sort()) {
    try {
      parts.push(formatPerfSummary(f.replace(/\.perf\.data$/, ''), summarizePerf(join(dir, f))));
    } catch (err) {
      parts.push(`${f}: perf report failed: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  const text = parts.join('\n\n') + '\n';
  writeFileSync(join(dir, 'perf-summary.txt'), text);
  console.log(`\n## perf record (--perf)\n\n\`\`\`\n${text}\`\`\`\n`);
  console.error(`bench: perf records and perf-summary.txt in ${dir}`);
}

let interrupted = false;
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(sig, () => {
    if (interrupted) {
      killAllNow();
      process.exit(130);
    }
    interrupted = true;
    console.error(`\nbench: ${sig}, stopping every process it started …`);
    void cleanup().finally(() => process.exit(130));
  });
}
process.on('exit', killAllNow);

try {
  const { scenarios, settings, targetsNamed, install, write } = parse(process.argv.slice(2));
  for (const s of scenarios) await runScenario(s, settings, targetsNamed, install, write);
  await cleanup();
} catch (err) {
  console.error(`bench: ${(err as Error).message}`);
  await cleanup();
  process.exitCode = 1;
}
