// The external programs the scenarios drive, where they come from (Debian packages), and
// their versions for the results' environment record. Missing ones are installed with
// apt-get when we are root; otherwise the harness stops and prints the exact command.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export type Tool = 'wrk' | 'iperf3' | 'ssh' | 'ssh-keygen' | 'sshd' | 'nginx' | 'openssl' | 'h2load';

const PACKAGE: Record<Tool, string> = {
  wrk: 'wrk',
  iperf3: 'iperf3',
  ssh: 'openssh-client',
  'ssh-keygen': 'openssh-client',
  sshd: 'openssh-server',
  nginx: 'nginx-light',
  openssl: 'openssl',
  h2load: 'nghttp2-client',
};

/** sshd must be started by absolute path (it re-executes itself). */
const FIXED_PATH: Partial<Record<Tool, string>> = { sshd: '/usr/sbin/sshd', nginx: '/usr/sbin/nginx', openssl: '/usr/bin/openssl' };

export function toolPath(tool: Tool): string | null {
  const fixed = FIXED_PATH[tool];
  if (fixed) return existsSync(fixed) ? fixed : null;
  try {
    return execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

export function installCommand(tools: Tool[]): string {
  const pkgs = [...new Set(tools.map((t) => PACKAGE[t]))];
  return `apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${pkgs.join(' ')}`;
}

/**
 * Makes sure `required` tools exist (installing if we may) and tries `optional` ones too.
 * Returns the optional tools that are still missing; throws for missing required ones.
 */
export function ensureTools(required: Tool[], optional: Tool[], mayInstall: boolean): Tool[] {
  const missing = [...required, ...optional].filter((t) => toolPath(t) === null);
  if (missing.length > 0 && mayInstall && process.getuid?.() === 0) {
    const cmd = installCommand(missing);
    console.error(`bench: installing ${missing.join(', ')}: ${cmd}`);
    try {
      execFileSync('sh', ['-c', `${cmd} >/dev/null`], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
    } catch (err) {
      console.error(`bench: apt-get failed: ${(err as Error).message}`);
    }
  }
  const stillRequired = required.filter((t) => toolPath(t) === null);
  if (stillRequired.length > 0) {
    throw new Error(`missing ${stillRequired.join(', ')}; install with:\n  ${installCommand(stillRequired)}`);
  }
  return optional.filter((t) => toolPath(t) === null);
}

function firstLine(cmd: string, args: string[]): string {
  try {
    // Several of these print their version on stderr; 2>&1 through sh catches both.
    const out = execFileSync('sh', ['-c', `${[cmd, ...args].map(quote).join(' ')} 2>&1`], { encoding: 'utf8', timeout: 5_000 });
    return out.trim().split('\n')[0] ?? '';
  } catch (err) {
    const out = String((err as { stdout?: string }).stdout ?? '');
    return out.trim().split('\n')[0] || 'unknown';
  }
}

const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

export function toolVersions(): Record<string, string> {
  const v: Record<string, string> = {};
  if (toolPath('ssh')) v.openssh = firstLine('ssh', ['-V']);
  if (toolPath('wrk')) v.wrk = firstLine('wrk', ['-v']).replace(/\s*Copyright.*$/, '');
  if (toolPath('iperf3')) v.iperf3 = firstLine('iperf3', ['--version']);
  if (toolPath('nginx')) v.nginx = firstLine('/usr/sbin/nginx', ['-v']);
  if (toolPath('openssl')) v.openssl = firstLine('/usr/bin/openssl', ['version']);
  if (toolPath('h2load')) v.h2load = firstLine('h2load', ['--version']);
  return v;
}
