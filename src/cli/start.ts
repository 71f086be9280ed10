import { Command } from 'commander';
import { act, examples } from './common.js';
import { resolveTarget } from './config.js';
import { detachIfAsked, detachOptions } from './detach.js';
import { CliError, EXIT } from './errors.js';
import { runTunnels } from './expose.js';
import { addInspectOptions } from './inspect.js';
import { err, out, printJson } from './output.js';
import { findTunnelFile, readTunnelFile, TunnelFileError } from './tunnel-file.js';
import { localLabel, type TunnelSpec } from './tunnel-spec.js';

// burrow start [NAME…] and burrow config check: the tunnels of a burrow.yml (tunnel-file.ts),
// all of them or the named ones, run over one control connection by expose.ts's runTunnels.

const FILE_EXAMPLE = [
  '# burrow.yml',
  '#   version: 1',
  '#   server: https://burrow.example.com   # optional: else the current context',
  '#   tunnels:',
  '#     web: { proto: http, addr: 3000, id: myapp, basic_auth: [ "me:secret" ], allow_ip: [ 10.0.0.0/8 ] }',
  '#     db:  { proto: tcp, addr: "localhost:5432", remote_port: 25432 }',
  '#     api: { proto: http, addr: "https://localhost:8443", host_header: rewrite, team: web }',
  '# keys of an entry: proto, addr, id, team, remote_port, basic_auth, allow_ip, deny_ip, expires,',
  '# host_header, upstream_insecure (the flags of `burrow http|tcp`)',
];

/**
 * Reads the file; an invalid one prints every error (file:line: field: message) first, or under
 * --json puts them in the one JSON error's text.
 */
function loadFile(config: string | undefined, json: boolean): ReturnType<typeof readTunnelFile> {
  const path = findTunnelFile(config);
  try {
    return readTunnelFile(path);
  } catch (e) {
    if (!(e instanceof TunnelFileError)) throw e;
    if (json) throw new CliError(e.exitCode, e.title, e.lines().join('; '), '`burrow config check` checks the file without starting anything');
    for (const l of e.lines()) err.line(`${err.paint('red', 'error:')} ${l}`);
    throw e;
  }
}

function pick(tunnels: TunnelSpec[], names: string[], path: string): TunnelSpec[] {
  if (names.length === 0) return tunnels;
  const unknown = names.filter((n) => !tunnels.some((t) => t.name === n));
  if (unknown.length) {
    throw new CliError(EXIT.usage, 'unknown tunnel', `${path} has no tunnel ${unknown.map((n) => `"${n}"`).join(', ')}`, `its tunnels: ${tunnels.map((t) => t.name).join(', ')}`);
  }
  return tunnels.filter((t) => names.includes(t.name));
}

export function registerStart(program: Command): void {
  examples(
    addInspectOptions(
      detachOptions(
        program
          .command('start')
          .description('start the tunnels of a burrow.yml (all, or the NAMEs given) over one connection; the http ones share the inspector at http://127.0.0.1:4040')
          .argument('[names...]', 'tunnels of the file to start (default: all)')
          .option('--config <file>', 'the file (default ./burrow.yml, then $XDG_CONFIG_HOME/burrow/burrow.yml)')
          .option('-q, --quiet', 'no per-request lines'),
      ),
    ).action(
      act<{ config?: string; quiet?: boolean; detach?: boolean; pidFile?: string; inspect?: string | boolean }, [string[]]>(async (ctx, names) => {
        const file = loadFile(ctx.opts.config, ctx.json);
        const specs = pick(file.tunnels, names, file.path);
        if (await detachIfAsked(ctx.opts)) return;
        // --server / BURROW_SERVER beat the file, which beats the context; a context's key still
        // only goes to its own server (resolveTarget).
        const server = ctx.opts.server ?? process.env.BURROW_SERVER ?? file.server;
        const target = resolveTarget({ server, token: ctx.opts.token, context: ctx.opts.context });
        await runTunnels(ctx, target, specs, true);
      }),
    ),
    [
      'burrow start                       # every tunnel of ./burrow.yml',
      'burrow start web db --config ~/dev/burrow.yml',
      'burrow start --json                # one JSON event a line, each with its "tunnel"',
      'burrow start --inspect 4041        # the inspector (every http tunnel\'s requests) on http://127.0.0.1:4041',
      '# in a script: returns once the tunnels are up; stdout is "NAME URL" per tunnel',
      'burrow start --detach > urls.txt && burrow stop',
      ...FILE_EXAMPLE,
    ],
  );

}

export function registerConfig(program: Command): void {
  const config = program.command('config').description('the burrow.yml of `burrow start`');
  examples(config, ['burrow config check', 'burrow config check --config ~/dev/burrow.yml']);
  examples(
    config
      .command('check')
      .description('validate a burrow.yml: every error with its line and field (exit 2), or a summary of its tunnels')
      .option('--config <file>', 'the file (default ./burrow.yml, then $XDG_CONFIG_HOME/burrow/burrow.yml)')
      .action(
        act<{ config?: string }>((ctx) => {
          const path = findTunnelFile(ctx.opts.config);
          let file: ReturnType<typeof readTunnelFile>;
          try {
            file = readTunnelFile(path);
          } catch (e) {
            if (!(e instanceof TunnelFileError)) throw e;
            if (ctx.json) {
              printJson({ file: e.path, valid: false, errors: e.errors });
              process.exitCode = EXIT.usage;
              return;
            }
            for (const l of e.lines()) err.line(`${err.paint('red', 'error:')} ${l}`);
            throw e;
          }
          if (ctx.json) {
            printJson({ file: file.path, valid: true, server: file.server ?? null, tunnels: file.tunnels.map((t) => ({ name: t.name, proto: t.type, addr: localLabel(t), id: t.id ?? null })) });
            return;
          }
          out.line(`${file.path}: ok, ${file.tunnels.length} tunnel${file.tunnels.length === 1 ? '' : 's'}${file.server ? ` on ${file.server}` : ''}`);
          const w = Math.max(...file.tunnels.map((t) => t.name.length));
          for (const t of file.tunnels) out.line(`  ${t.name.padEnd(w)}  ${t.type.padEnd(4)} ${localLabel(t)}${t.id ? `  id ${t.id}` : ''}${t.remotePort ? `  remote port ${t.remotePort}` : ''}`);
        }),
      ),
    ['burrow config check', 'burrow config check --config ci/burrow.yml --json'],
  );
}
