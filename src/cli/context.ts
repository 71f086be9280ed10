import { resolve as resolvePath } from 'node:path';
import { trustedCas } from './tls-trust.js';
import { Command } from 'commander';
import { act, examples } from './common.js';
import { configPath, loadConfig, normalizeServer, saveConfig } from './config.js';
import { CliError, EXIT } from './errors.js';
import { out, printJson, printTable, tokenPrefix } from './output.js';

// burrow context create|use|list|current|delete: named server + key pairs in the config file.
// Local only: no server is contacted. --json prints the context with its key as a prefix only.

export interface ContextView {
  name: string;
  server: string;
  token_prefix: string | null;
  current: boolean;
}

function view(name: string, server: string, token: string | null, current: boolean): ContextView {
  return { name, server, token_prefix: token ? tokenPrefix(token) : null, current };
}

function noSuch(name: string): CliError {
  return new CliError(EXIT.notFound, 'unknown context', `no context named "${name}"`, 'list them with `burrow context list`');
}

function checkUrl(server: string): string {
  let u: URL;
  try {
    u = new URL(server);
  } catch {
    throw new CliError(EXIT.usage, 'invalid server', `"${server}" is not a URL`, 'give it as http://host:port or https://host');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new CliError(EXIT.usage, 'invalid server', `"${server}" is not http(s)`, 'give it as http://host:port or https://host');
  }
  return normalizeServer(server);
}

export function registerContext(program: Command): void {
  const context = program.command('context').description(`named servers and keys (stored in ${configPath()})`);
  examples(context, [
    'burrow context create prod --server https://burrow.example.com --token bk_…',
    'burrow context use prod',
    'burrow context list',
  ]);

  examples(
    context
      .command('create')
      .description('add a context; it becomes current if none is')
      .argument('<name>', 'context name')
      .option('--use', 'make it the current context')
      .option('--force', 'replace an existing context of that name')
      .action(
        act<{ use?: boolean; force?: boolean }>((ctx, name) => {
          // The global --server/--token flags are the context's values here, not overrides.
          if (!ctx.opts.server) throw new CliError(EXIT.usage, 'missing option', '--server URL is required', 'e.g. `burrow context create prod --server https://burrow.example.com`');
          const server = checkUrl(ctx.opts.server);
          const cfg = loadConfig();
          if (cfg.contexts[name] && !ctx.opts.force) {
            throw new CliError(EXIT.conflict, 'context exists', `a context named "${name}" exists`, `use --force to replace it, or \`burrow context delete ${name}\``);
          }
          const token = ctx.opts.token ?? null;
          // Checked now (readable PEM) and kept as an absolute path: later commands run anywhere.
          const ca = ctx.opts.ca ? resolvePath(ctx.opts.ca) : null;
          if (ca) trustedCas(ca);
          cfg.contexts[name] = { server, token, ...(ca ? { ca } : {}) };
          if (!cfg.currentContext || ctx.opts.use) cfg.currentContext = name;
          saveConfig(cfg);
          if (ctx.json) return printJson(view(name, server, token, cfg.currentContext === name));
          out.line(`${out.paint('green', '✓')} context ${out.paint('bold', name)} → ${server}${token ? ` (key ${tokenPrefix(token)})` : ''}${cfg.currentContext === name ? ' (current)' : ''}`);
          if (!token) out.line(out.paint('dim', `log in with: burrow login --context ${name}`));
        }),
      ),
    [
      'burrow context create local --server http://localhost:8080 --token "$KEY"',
      'burrow context create prod --server https://burrow.example.com --use',
      'burrow context create lab --server https://burrow.lab.internal --ca ./lab-ca.pem --token "$KEY"',
    ],
  );

  examples(
    context
      .command('use')
      .description('make a context the current one')
      .argument('<name>', 'context name')
      .action(
        act((ctx, name) => {
          const cfg = loadConfig();
          const c = cfg.contexts[name];
          if (!c) throw noSuch(name);
          cfg.currentContext = name;
          saveConfig(cfg);
          if (ctx.json) return printJson(view(name, c.server, c.token, true));
          out.line(`${out.paint('green', '✓')} now using ${out.paint('bold', name)} (${c.server})`);
        }),
      ),
    ['burrow context use prod'],
  );

  examples(
    context
      .command('list')
      .alias('ls')
      .description('list contexts; the current one is marked with *')
      .action(
        act((ctx) => {
          const cfg = loadConfig();
          const rows = Object.entries(cfg.contexts).map(([name, c]) => view(name, c.server, c.token, name === cfg.currentContext));
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'CURRENT', value: (r) => (r.current ? '*' : '') },
              { header: 'NAME', value: (r) => r.name, style: (r) => (r.current ? 'bold' : undefined) },
              { header: 'SERVER', value: (r) => r.server },
              { header: 'KEY', value: (r) => r.token_prefix ?? '-' },
            ],
            'no contexts: create one with `burrow context create NAME --server URL`',
          );
        }),
      ),
    ['burrow context list'],
  );

  examples(
    context
      .command('current')
      .description('show the current context and what overrides it')
      .action(
        act((ctx) => {
          // Shows what commands will actually use: flags and env beat the file.
          const target = ctx.target();
          if (ctx.json) {
            return printJson({ name: target.contextName, server: target.server, token_prefix: target.token ? tokenPrefix(target.token) : null, current: true });
          }
          if (!target.contextName) out.line(out.paint('dim', 'no current context (create one with `burrow context create NAME --server URL`)'));
          else out.line(target.contextName);
          out.line(out.paint('dim', `server ${target.server} · key ${tokenPrefix(target.token)}`));
        }),
      ),
    ['burrow context current'],
  );

  examples(
    context
      .command('delete')
      .alias('rm')
      .description('forget a context and its key (the key stays valid on the server)')
      .argument('<name>', 'context name')
      .action(
        act((ctx, name) => {
          const cfg = loadConfig();
          const c = cfg.contexts[name];
          if (!c) throw noSuch(name);
          delete cfg.contexts[name];
          if (cfg.currentContext === name) cfg.currentContext = null;
          saveConfig(cfg);
          if (ctx.json) return printJson(view(name, c.server, c.token, false));
          out.line(`${out.paint('green', '✓')} deleted context ${name}`);
          if (c.token) out.line(out.paint('dim', `its key ${tokenPrefix(c.token)} still works until revoked (\`burrow keys revoke ${tokenPrefix(c.token).replace('…', '')}\`)`));
        }),
      ),
    ['burrow context delete old'],
  );
}
