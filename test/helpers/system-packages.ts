import { spawnSync } from 'node:child_process';

// Debian packages the suite runs that npm cannot bring: Pebble, Let's Encrypt's test CA, and
// its pebble-challtestsrv (test/acme/), with curl for their DNS hook. `npm test` installs them
// when they are missing and it may (root, with apt-get), as .ci/run does, so `npm ci && npm test`
// works on a fresh machine; otherwise the files that need them fail saying how to install them.

const NEEDED = [
  { bin: 'pebble', pkg: 'pebble' },
  { bin: 'pebble-challtestsrv', pkg: 'pebble' },
  { bin: 'curl', pkg: 'curl' },
];

const missing = (bin: string): boolean => spawnSync(bin, ['-h'], { stdio: 'ignore' }).error !== undefined;

export function ensureSystemPackages(): void {
  const pkgs = [...new Set(NEEDED.filter((n) => missing(n.bin)).map((n) => n.pkg))];
  if (pkgs.length === 0) return;
  if (process.getuid?.() !== 0 || missing('apt-get')) {
    console.error(`[runner] ${pkgs.join(', ')} missing and not installable here (needs root and apt-get): the ACME tests will fail; install them with apt-get install ${pkgs.join(' ')}`);
    return;
  }
  console.error(`[runner] installing ${pkgs.join(', ')} (Debian) for the ACME tests`);
  const r = spawnSync('sh', ['-c', `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${pkgs.join(' ')} >/dev/null`], {
    stdio: ['ignore', 'ignore', 'inherit'],
    timeout: 600_000,
  });
  if (r.status !== 0) console.error(`[runner] apt-get install ${pkgs.join(' ')} failed (exit ${r.status}): the ACME tests will fail`);
}
