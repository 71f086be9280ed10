import { CliError, EXIT } from './errors.js';
import type { Target } from './config.js';
import { fetchTrusting } from './tls-trust.js';
import { unreachable } from './client.js';

// What to tell someone who has no working key: `burrow login` only where the server has a login
// provider (GET /auth/v1/providers lists them); elsewhere keys come from an administrator, and
// suggesting a login that cannot work only sends them to an error page.

const PROVIDERS_TIMEOUT_MS = 5_000;
const PASS_A_KEY = 'pass --token KEY, set BURROW_TOKEN, or `burrow context create NAME --server URL --token KEY`';

/** The server's login providers; [] when it has none; null when it would not say (older server, a proxy page). Throws when nothing answers. */
async function loginProviders(target: Target): Promise<string[] | null> {
  const res = await fetchTrusting(target.ca, `${target.server}/auth/v1/providers`, { method: 'GET', headers: { accept: 'application/json' }, signal: AbortSignal.timeout(PROVIDERS_TIMEOUT_MS) });
  const body = (await res.json().catch(() => null)) as { providers?: unknown } | null;
  if (res.status === 404) return [];
  if (!res.ok || !Array.isArray(body?.providers)) return null;
  return body.providers.filter((n): n is string => typeof n === 'string');
}

function hintFor(providers: string[] | null): string {
  if (providers === null) return `run \`burrow login\` if the server offers a browser login; else ask an administrator for a key and ${PASS_A_KEY}`;
  if (providers.length === 0) return `this server has no browser login: ask an administrator for a key, then ${PASS_A_KEY}`;
  const flag = providers.includes('github') ? '' : ` --provider ${providers[0]}`;
  return `run \`burrow login${flag}\`, or ${PASS_A_KEY}`;
}

/** How to get a key for this server; a server that does not answer gets the generic hint. */
export async function keyHint(target: Target): Promise<string> {
  return hintFor(await loginProviders(target).catch(() => null));
}

/**
 * "not logged in" (exit 3), once the server answered: a mistyped or stopped --server says
 * "server unreachable" (exit 6) with its URL instead, since the user's next step differs.
 */
export async function notLoggedIn(target: Target): Promise<CliError> {
  let providers: string[] | null;
  try {
    providers = await loginProviders(target);
  } catch (err) {
    return unreachable(target.server, err);
  }
  return new CliError(EXIT.auth, 'not logged in', `no API key for ${target.server}`, hintFor(providers));
}
