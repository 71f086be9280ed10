import { createHmac } from 'node:crypto';
import { isIP } from 'node:net';
import { isPublicSuffix } from './public-suffix.js';

// A custom domain a user brings to a tunnel: which names may be claimed, and the ownership
// token (bound to the user: another user cannot reuse someone's TXT record).

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** The name lower-cased without a trailing dot, or why it cannot be a custom domain. */
export function customDomainProblem(raw: string, tunnelDomain: string): { name: string } | { problem: string } {
  const name = raw.trim().toLowerCase().replace(/\.$/, '');
  if (isIP(name) !== 0 || /^\[.*\]$/.test(name)) return { problem: `"${raw}" is an IP address; a custom domain is a DNS name such as app.example.com` };
  if (name.includes('*')) return { problem: `"${raw}" is a wildcard; add each name on its own (wildcards are issued only for the tunnel domain)` };
  if (name.length > 253 || !name.split('.').every((l) => LABEL.test(l))) return { problem: `"${raw}" is not a DNS name (labels of a-z, 0-9 and "-", at most 63 characters each)` };
  if (!name.includes('.')) return { problem: `"${raw}" is a single label; give the full name, such as app.example.com` };
  if (name === tunnelDomain || name.endsWith(`.${tunnelDomain}`)) return { problem: `"${name}" is under the tunnel domain ${tunnelDomain}; its tunnels are served there already` };
  if (isPublicSuffix(name)) return { problem: `"${name}" is a public suffix (a name under which anyone registers domains); add a domain you own under it` };
  return { name };
}

/** The TXT value at _burrow-challenge.<name> that proves `userId` controls `name`. */
export function ownershipToken(secret: Buffer, userId: string, name: string): string {
  return createHmac('sha256', secret).update(`burrow custom domain\0${userId}\0${name}`).digest('base64url');
}

export const ownershipTxtName = (name: string): string => `_burrow-challenge.${name}`;
