// The peer: OpenSSH remote forwarding. Our own sshd on loopback (generated host key, one
// authorized client key, nothing from /etc/ssh), and one `ssh -tt -R 0:127.0.0.1:<origin> …
// 'exec sleep …'` per exposed service (a pty: TCP_NODELAY on both ends, as an interactive
// ssh has), with the AES-GCM cipher (the fastest OpenSSH offers on AES-NI CPUs).
//
//   load tool ──TCP──▶ sshd session child (listens on the allocated port)
//                        ══ one SSH connection (channels multiplexed) ══▶ ssh client ──TCP──▶ origin
import { mkdirSync, writeFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { userInfo } from 'node:os';
import { start, stop, run, sleep, tempDir, waitForOutput, descendants, type Proc } from '../lib/procs.js';
import { freePort, freePorts, waitForPort, LOOPBACK } from '../lib/net.js';
import { toolPath } from '../lib/tools.js';
import { Unavailable, type Target } from './target.js';
import { startProbed, type ProbeSettings, type Probed } from '../lib/probes.js';

export const SSH_CIPHER = 'aes128-gcm@openssh.com';
const START_TIMEOUT_MS = 10_000;

/** `probes`: sshd and ssh under perf stat (the http scenarios' system-call rows). */
export async function sshTarget(probes?: ProbeSettings): Promise<Target> {
  const sshd = toolPath('sshd');
  const ssh = toolPath('ssh');
  const keygen = toolPath('ssh-keygen');
  if (!sshd || !ssh || !keygen) throw new Unavailable('ssh', 'OpenSSH not installed (apt-get install -y openssh-server openssh-client)');

  const dir = tempDir('ssh');
  const hostKey = join(dir, 'host_ed25519');
  const clientKey = join(dir, 'id_ed25519');
  await run('ssh-keygen', keygen, ['-q', '-t', 'ed25519', '-N', '', '-f', hostKey], START_TIMEOUT_MS);
  await run('ssh-keygen', keygen, ['-q', '-t', 'ed25519', '-N', '', '-f', clientKey], START_TIMEOUT_MS);
  writeFileSync(join(dir, 'authorized_keys'), readFileSync(`${clientKey}.pub`));
  // sshd refuses to start without its privilege-separation directory.
  if (!existsSync('/run/sshd')) mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });

  const port = await freePort();
  const config = join(dir, 'sshd_config');
  writeFileSync(
    config,
    [
      `Port ${port}`,
      `ListenAddress ${LOOPBACK}`,
      `HostKey ${hostKey}`,
      `PidFile ${join(dir, 'sshd.pid')}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      'StrictModes no',
      'UsePAM no',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'PubkeyAuthentication yes',
      'PermitRootLogin prohibit-password',
      'AllowTcpForwarding yes',
      'GatewayPorts clientspecified',
      'MaxStartups 200:30:400',
      'LogLevel ERROR',
      '',
    ].join('\n'),
  );
  const probedDaemon = startProbed('sshd', sshd, ['-D', '-e', '-f', config], probes);
  const daemon = probedDaemon.proc;
  // under perf stat, sshd itself is the daemon process's one child
  const ownChildren = probedDaemon.syscallLog ? 1 : 0;
  try {
    await waitForPort(port, START_TIMEOUT_MS, 'sshd');
  } catch (err) {
    await stop(daemon);
    throw new Unavailable('ssh', `sshd did not start: ${(err as Error).message}\n${daemon.stderr()}`);
  }

  // The readiness probe made sshd fork a pre-auth child; let it leave, or it would count as
  // part of the idle server's memory and then vanish from later samples.
  for (const deadline = Date.now() + 5_000; descendants(daemon.pid).length > ownChildren && Date.now() < deadline; ) await sleep(50);

  const user = userInfo().username;
  const tunnels: Proc[] = [];
  const probedTunnels: Probed[] = [];
  const version = await run('ssh-version', ssh, ['-V'], START_TIMEOUT_MS);

  /** One ssh connection carrying `count` remote forwards to originPort; resolves their ports. */
  async function forward(originPort: number, count: number): Promise<number[]> {
    // One forward: let sshd pick the port (-R 0:…). Several: ssh drops -R specs identical to
    // an earlier one, so each gets its own port, picked free beforehand. The 127.0.0.1 bind
    // (GatewayPorts clientspecified) keeps sshd to one listener each instead of ::1 and IPv4.
    const ports = count === 1 ? [0] : await freePorts(count);
    const forwards = ports.flatMap((p) => ['-R', `${LOOPBACK}:${p}:${LOOPBACK}:${originPort}`]);
    // -tt and a remote command, as an interactive user runs ssh: with a pty both ends set
    // TCP_NODELAY (OpenSSH's "interactive" session). `-N` leaves Nagle on, which alone costs a
    // small request ~40 ms at p99 (delayed ACK); that peer would be an unfairly slow one.
    const probed = startProbed('ssh-R', ssh!, [
      '-tt',
      '-o', 'BatchMode=yes',
      '-o', 'StrictHostKeyChecking=no',
      '-o', 'UserKnownHostsFile=/dev/null',
      '-o', 'ExitOnForwardFailure=yes',
      '-o', `Ciphers=${SSH_CIPHER}`,
      '-o', 'Compression=no',
      '-o', 'LogLevel=INFO',
      '-i', clientKey,
      '-p', String(port),
      ...forwards,
      `${user}@${LOOPBACK}`,
      // Holds the session (and so the pty) open; the harness's stdin is /dev/null.
      'exec sleep 2147483647',
    ], probes);
    const proc = probed.proc;
    tunnels.push(proc);
    probedTunnels.push(probed);
    if (count === 1) {
      // With -R 0:… sshd picks the port and ssh reports it: "Allocated port N for remote forward to …".
      const port = await waitForOutput(proc, 'stderr', (t) => /Allocated port (\d+) for remote forward/.exec(t)?.[1], START_TIMEOUT_MS, 'the allocated remote port');
      await waitForPort(Number(port), START_TIMEOUT_MS, 'ssh -R forward');
      return [Number(port)];
    }
    // ssh says nothing per fixed-port forward; the last one listening means all were granted
    // (ssh sends them in order and, with ExitOnForwardFailure, exits on any refusal).
    await waitForPort(ports[ports.length - 1]!, START_TIMEOUT_MS + count * 5, `the last of ${count} ssh -R forwards`);
    return ports;
  }

  return {
    name: 'ssh',
    describe: `${version.stderr.trim() || version.stdout.trim()}; own sshd on ${LOOPBACK}; ssh -tt (pty: TCP_NODELAY both ends) -o Ciphers=${SSH_CIPHER} -o Compression=no -R 0:127.0.0.1:<origin> 'exec sleep 2147483647', one ssh connection per exposed service`,
    expose: async (_kind, originPort) => ({ port: (await forward(originPort, 1))[0]! }),
    openIdleTunnels: async (originPort, count) => {
      await forward(originPort, count);
    },
    checkIdleTunnels: () => {
      const dead = tunnels.find((t) => !t.isRunning());
      if (dead) throw new Error(`an ssh -R process exited: ${dead.stderr().trim().split('\n').pop()}`);
    },
    serverPids: () => (daemon.isRunning() ? [daemon.pid, ...descendants(daemon.pid)] : []),
    // under perf stat, each ssh is perf's child
    clientPids: () => tunnels.filter((t) => t.isRunning()).flatMap((t) => [t.pid, ...descendants(t.pid)]),
    probes: () => ({ server: daemon.isRunning() ? [probedDaemon] : [], client: probedTunnels.filter((p) => p.proc.isRunning()) }),
    closeTunnels: async () => {
      probedTunnels.splice(0);
      await Promise.all(tunnels.splice(0).map((t) => stop(t)));
    },
    close: async () => {
      await Promise.all(tunnels.splice(0).map((t) => stop(t)));
      // Session children left their process group; end them before the listener.
      for (const pid of descendants(daemon.pid)) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          /* gone */
        }
      }
      await stop(daemon);
    },
  };
}

