// Tunnel ids: DNS labels, some names reserved. Its own module (frames.ts re-exports it) so that
// the CLI can check an id without loading the msgpack codec.

const ID_RE = /^[a-z0-9](?:[a-z0-9-]{1,61})[a-z0-9]$/;
export const RESERVED_IDS = [
  'api', 'www', 'admin', 'auth', 'app', 'static', 'status', 'mail',
  // official-sounding: a page there would pass for the server's own
  'login', 'oauth', 'metrics', 'healthz', 'readyz', 'tunnel', 'docs',
] as const;

/** Why `id` cannot be a tunnel id, or null when it can. */
export function tunnelIdProblem(id: string, domain: string): string | null {
  if (!ID_RE.test(id)) return `tunnel id "${id}" must be 3-63 characters of a-z, 0-9 and "-", starting and ending with a letter or digit`;
  // R-LDH labels ("??--", RFC 5890 2.3.1) are reserved for IDNA: "xn--" punycode renders as
  // look-alike Unicode in browsers, and other prefixes are not valid labels to register.
  if (id.slice(2, 4) === '--') return `tunnel id "${id}" is refused: "--" in the third and fourth characters is reserved for internationalised names (punycode "xn--"), which can pose as other names`;
  const firstLabel = domain.split('.')[0];
  if ((RESERVED_IDS as readonly string[]).includes(id) || id === firstLabel) return `tunnel id "${id}" is reserved`;
  return null;
}

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
export function randomTunnelId(random: (n: number) => Uint8Array): string {
  const bytes = random(8);
  let s = '';
  for (const b of bytes) s += ALPHABET[b % ALPHABET.length];
  return s;
}
