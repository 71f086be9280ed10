import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { issue, makeCa } from './certs.js';
import { lanePorts } from './ports.js';
import { eventually } from './deadline.js';

// Pebble, Let's Encrypt's ACME test server (Debian package `pebble`, installed by .ci/run), and
// its pebble-challtestsrv as the DNS server both Pebble and burrowd ask (every name is 127.0.0.1,
// no AAAA: burrowd listens on IPv4 loopback): on loopback, on the top
// ports of this file's lane, with a directory certificate signed by a CA the test makes.
// Challenges are checked at once (PEBBLE_VA_NOSLEEP), nonces never rejected at random, and
// authorizations never reused, so every order asks for its challenges.

export interface Pebble {
  directoryUrl: string;
  /** Trusts the directory's TLS certificate (in-process clients). */
  dispatcher: Agent;
  /** The same CA as a file, for a child burrowd's NODE_EXTRA_CA_CERTS. */
  caFile: string;
  /** pebble-challtestsrv's DNS (127.0.0.1:port), for --dns-resolver. */
  dnsServer: string;
  /** The port Pebble's HTTP-01 checks connect to (burrowd's --http-port). */
  httpPort: number;
  /** A DNS hook script (add|remove <fqdn> <value>) that writes to pebble-challtestsrv. */
  hook: string;
  /** The TXT values pebble-challtestsrv holds now, set by hand (a person's record, a user's ownership TXT). */
  setTxt(fqdn: string, value: string): Promise<void>;
  clearTxt(fqdn: string): Promise<void>;
  /** Pebble's issuing root (PEM), regenerated at every start. */
  root(): Promise<string>;
  dir: string;
  stop(): Promise<void>;
}

function assertInstalled(): void {
  for (const bin of ['pebble', 'pebble-challtestsrv', 'curl']) {
    if (spawnSync(bin, ['-h'], { stdio: 'ignore' }).error) throw new Error(`${bin} is not installed: apt-get install pebble curl (.ci/run does)`);
  }
}

/** `validitySecs`: Pebble's certificateValidityPeriod. Bookworm's Pebble has no ARI; trixie's (2.6) offers a 48-hour window, which burrowd does not follow for certificates shorter than it (src/acme/renewal.ts). */
export async function startPebble(opts: { validitySecs?: number } = {}): Promise<Pebble> {
  assertInstalled();
  const { max } = lanePorts(450);
  const base = max - 10;
  const [acmePort, mgmtPort, httpPort, tlsPort, dnsPort, challMgmtPort] = [base, base + 1, base + 2, base + 3, base + 4, base + 5];
  const dir = mkdtempSync(join(tmpdir(), 'burrow-pebble-'));
  const ca = makeCa(dir, 'pebble-directory');
  const tls = issue(dir, ca, 'pebble', 'localhost', ['localhost', 'IP:127.0.0.1']);
  const config = join(dir, 'pebble.json');
  writeFileSync(
    config,
    JSON.stringify({
      pebble: {
        listenAddress: `127.0.0.1:${acmePort}`,
        managementListenAddress: `127.0.0.1:${mgmtPort}`,
        certificate: tls.cert,
        privateKey: tls.key,
        httpPort,
        tlsPort,
        ocspResponderURL: '',
        externalAccountBindingRequired: false,
        ...(opts.validitySecs ? { certificateValidityPeriod: opts.validitySecs } : {}),
      },
    }),
  );
  const procs: ChildProcess[] = [];
  const logs: string[] = [];
  const run = (cmd: string, args: string[], env: Record<string, string> = {}): void => {
    const p = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (b: Buffer): void => void logs.push(b.toString());
    p.stdout!.on('data', keep);
    p.stderr!.on('data', keep);
    procs.push(p);
  };
  run('pebble-challtestsrv', ['-defaultIPv6', '', '-dns01', `127.0.0.1:${dnsPort}`, '-http01', '', '-https01', '', '-tlsalpn01', '', '-management', `127.0.0.1:${challMgmtPort}`]);
  run('pebble', ['-config', config, '-dnsserver', `127.0.0.1:${dnsPort}`], { PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' });
  const dispatcher = new Agent({ connect: { ca: readFileSync(ca.cert, 'utf8') } });
  const directoryUrl = `https://127.0.0.1:${acmePort}/dir`;
  const challtest = async (path: string, body: unknown): Promise<void> => {
    const res = await request(`http://127.0.0.1:${challMgmtPort}${path}`, { method: 'POST', body: JSON.stringify(body) });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`pebble-challtestsrv ${path}: HTTP ${res.statusCode}`);
  };
  try {
    await eventually(async () => {
      const res = await request(directoryUrl, { dispatcher });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`directory: ${res.statusCode}`);
      await challtest('/clear-txt', { host: 'ready.test.' });
      return true;
    }, 10_000, 'Pebble to answer');
  } catch (err) {
    for (const p of procs) p.kill('SIGKILL');
    throw new Error(`Pebble did not start: ${(err as Error).message}\n${logs.join('')}`);
  }
  const hook = join(dir, 'dns-hook.sh');
  writeFileSync(
    hook,
    `#!/bin/sh
# burrowd's --acme-dns-hook for the tests: add|remove <fqdn> <value> on pebble-challtestsrv.
set -e
case "$1" in
  add) curl -sf -X POST -d "{\\"host\\":\\"$2.\\",\\"value\\":\\"$3\\"}" http://127.0.0.1:${challMgmtPort}/set-txt ;;
  remove) curl -sf -X POST -d "{\\"host\\":\\"$2.\\"}" http://127.0.0.1:${challMgmtPort}/clear-txt ;;
  *) echo "unknown action $1" >&2; exit 2 ;;
esac
`,
  );
  chmodSync(hook, 0o755);
  return {
    directoryUrl,
    dispatcher,
    caFile: ca.cert,
    dnsServer: `127.0.0.1:${dnsPort}`,
    httpPort,
    hook,
    dir,
    setTxt: (fqdn, value) => challtest('/set-txt', { host: `${fqdn}.`, value }),
    clearTxt: (fqdn) => challtest('/clear-txt', { host: `${fqdn}.` }),
    async root() {
      const res = await request(`https://127.0.0.1:${mgmtPort}/roots/0`, { dispatcher });
      return res.body.text();
    },
    async stop() {
      await Promise.all(
        procs.map(
          (p) =>
            new Promise<void>((resolve) => {
              if (p.exitCode !== null) return resolve();
              p.once('exit', () => resolve());
              p.kill('SIGTERM');
            }),
        ),
      );
      await dispatcher.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
