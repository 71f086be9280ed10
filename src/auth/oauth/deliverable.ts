import { isIP } from 'node:net';

// Whether an email address could receive mail, judged by its domain alone (no DNS lookup: the
// answer must not depend on the network, and a login must not wait for it). A provider that
// "verifies" an address nobody can receive mail at vouches for nothing, so burrow never links a
// login to a user with such an address (src/auth/oauth/link.ts): the seed admin
// (seed@burrow.local) above all.

/**
 * Special-use top-level names (RFC 2606, 6761, 6762, 7686, 8375, 9476), ICANN's private-use
 * `.internal` and the names it will not delegate (`.home`, `.corp`): no public mail server
 * answers for them.
 */
const UNDELIVERABLE_TLDS = new Set(['local', 'localhost', 'test', 'example', 'invalid', 'internal', 'alt', 'onion', 'arpa', 'home', 'corp']);

/** An address is deliverable when its domain has at least two labels, is no address literal and is not under a special-use name. */
export function isDeliverableEmail(email: string): boolean {
  const at = email.lastIndexOf('@');
  if (at <= 0) return false;
  const domain = email.slice(at + 1).toLowerCase().replace(/\.$/, '');
  if (domain.startsWith('[') || isIP(domain) !== 0) return false;
  const labels = domain.split('.');
  if (labels.length < 2 || labels.some((l) => l === '')) return false;
  return !UNDELIVERABLE_TLDS.has(labels[labels.length - 1]!);
}
