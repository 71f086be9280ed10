import { execFile } from 'node:child_process';
import type { Logger } from '../log.js';
import { waitForTxt, type DnsServer } from './dns-wait.js';
import type { Pending, Solver } from './order.js';

// DNS-01 (the tunnel wildcard): `--acme-dns-hook script` is run as `script add|remove <fqdn>
// <value>` and must exit 0; without a hook, the record a person must create is printed on stdout
// and polled for. Either way burrowd waits until the name servers answer it.

const HOOK_TIMEOUT_MS = 120_000;
const HOOK_OUTPUT_BYTES = 64 * 1024;
/** How long the record may take to show: a hook's DNS API, or a person. */
const HOOK_PROPAGATION_MS = 10 * 60_000;
const MANUAL_PROPAGATION_MS = 24 * 3600_000;

export interface DnsSolverOptions {
  hook: string | null;
  resolvers: DnsServer[] | null;
  log: Logger;
  /** Where the record to create is printed without a hook (stdout). */
  say: (line: string) => void;
  /** Tests: poll faster. */
  pollMs?: number;
}

export const challengeName = (name: string): string => `_acme-challenge.${name.replace(/^\*\./, '')}`;

export function runHook(hook: string, action: 'add' | 'remove', fqdn: string, value: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(hook, [action, fqdn, value], { timeout: HOOK_TIMEOUT_MS, maxBuffer: HOOK_OUTPUT_BYTES, killSignal: 'SIGKILL' }, (err, _out, stderr) => {
      if (!err) return resolve();
      const why = err.killed ? `killed after ${HOOK_TIMEOUT_MS / 1000} s` : typeof err.code === 'number' ? `exit ${err.code}` : err.message;
      reject(new Error(`--acme-dns-hook ${action} ${fqdn} failed (${why})${stderr.trim() ? `: ${stderr.trim().slice(-500)}` : ''}`));
    });
  });
}

export class DnsSolver implements Solver {
  constructor(private readonly opts: DnsSolverOptions) {}

  typeFor(): 'dns-01' {
    return 'dns-01';
  }

  async present(challenges: Pending[]): Promise<void> {
    const byName = new Map<string, string[]>();
    for (const c of challenges) byName.set(challengeName(c.name), [...(byName.get(challengeName(c.name)) ?? []), c.dnsValue]);
    for (const [fqdn, values] of byName) {
      if (this.opts.hook) {
        for (const v of values) await runHook(this.opts.hook, 'add', fqdn, v);
      } else {
        this.opts.say(`ACME DNS-01: create this TXT record (then burrowd goes on by itself):\n${values.map((v) => `  ${fqdn}. 300 IN TXT "${v}"`).join('\n')}\n`);
      }
      this.opts.log.info({ fqdn, values: values.length }, 'ACME: waiting for the DNS-01 record on the name servers');
      await waitForTxt(fqdn, values, this.opts.resolvers, this.opts.hook ? HOOK_PROPAGATION_MS : MANUAL_PROPAGATION_MS, this.opts.pollMs);
    }
  }

  async cleanup(challenges: Pending[]): Promise<void> {
    for (const c of challenges) {
      if (!this.opts.hook) continue;
      await runHook(this.opts.hook, 'remove', challengeName(c.name), c.dnsValue).catch((err: unknown) => this.opts.log.warn({ err: (err as Error).message }, 'ACME: the DNS hook could not remove a record'));
    }
    if (!this.opts.hook) this.opts.say(`ACME DNS-01: done; the TXT record${challenges.length > 1 ? 's' : ''} at ${challengeName(challenges[0]!.name)} may be removed\n`);
  }
}
