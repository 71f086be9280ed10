import { poolRulesProblem, type AccessWire } from './access.js';

// Who may claim a tunnel id that a live registration holds: one rule, applied by the registry
// to its registration in memory (src/actors/registry.ts) and by claimTunnel to the row it
// reads FOR UPDATE (src/db/cluster.ts), so a node alone and a cluster decide alike.
//
//   no registration ─────────────────────────────▶ new          (a client more for the user)
//   a pool, same owner, --pool, same type, rules ─▶ join-pool   (a client more for the user)
//   a pool otherwise ────────────────────────────▶ refused: pool (same owner, no --pool) | rules | other-user
//   the same user's registration ────────────────▶ takeover     (replaces a client of the user)
//   another user's ──────────────────────────────▶ refused: other-user
//
// A pool's owner is its team when it has one (its members may be other users), else its user.
// What the rule does not see is each caller's: the id's reservation and grace hold (the
// registry's, only for `new`), the per-user limit, and a TCP port's uniqueness (the database's).

/** The live registration of the id, as its holder registered it. */
export interface HeldRegistration {
  userId: string;
  teamId: string | null;
  pool: boolean;
  type: 'http' | 'tcp';
  access: AccessWire | null;
}

/** What an Open asks for. */
export interface ClaimRequest {
  userId: string;
  teamId: string | null;
  pool: boolean;
  type: 'http' | 'tcp';
  access: AccessWire | null;
}

export type ClaimVerdict =
  | { ok: true; kind: 'new' | 'join-pool' | 'takeover' }
  | { ok: false; why: 'other-user' | 'pool' }
  | { ok: false; why: 'rules'; rules: string };

export function decideClaim(held: HeldRegistration | null, req: ClaimRequest): ClaimVerdict {
  if (held === null) return { ok: true, kind: 'new' };
  const sameOwner = held.teamId !== null ? held.teamId === req.teamId : held.userId === req.userId && req.teamId === null;
  if (held.pool) {
    // A pool is joined, never taken over: its members may be other users of its team.
    if (!req.pool || !sameOwner || held.type !== req.type) return { ok: false, why: sameOwner && !req.pool ? 'pool' : 'other-user' };
    // A member serves under the pool's rules: one that asked for others would be reached by
    // visitors its own rules refuse.
    const rules = poolRulesProblem(held.access, req.access);
    return rules === null ? { ok: true, kind: 'join-pool' } : { ok: false, why: 'rules', rules };
  }
  return held.userId === req.userId ? { ok: true, kind: 'takeover' } : { ok: false, why: 'other-user' };
}

/** Whether an admitted claim adds a client to its user's count (--max-tunnels-per-user): a takeover replaces one. */
export function addsClient(v: ClaimVerdict): boolean {
  return v.ok && v.kind !== 'takeover';
}

/** Every reason a claim is refused: the rule's, and its callers' (the limit, a TCP port, a join without its client). */
export type ClaimRefusal =
  | Extract<ClaimVerdict, { ok: false }>
  | { ok: false; why: 'limit'; held: number; max: number }
  | { ok: false; why: 'tcp-ports'; held: number; max: number }
  | { ok: false; why: 'rate'; max: number; retryAfterS: number }
  | { ok: false; why: 'port'; port: number | null }
  | { ok: false; why: 'no-client' };

/** The refusal's code and the words the client prints (never a credential: the rules are named, not their values). */
export function claimRefusalProblem(id: string, r: ClaimRefusal): { code: 'conflict' | 'forbidden' | 'not-found' | 'unavailable'; detail: string; retryAfterS?: number } {
  switch (r.why) {
    case 'other-user':
      return { code: 'conflict', detail: `tunnel id "${id}" is in use by another user` };
    case 'pool':
      return { code: 'conflict', detail: `tunnel id "${id}" is a pool: open it with --pool to join it` };
    case 'rules':
      return { code: 'conflict', detail: `tunnel id "${id}" is a pool serving under other rules: ${r.rules}` };
    case 'port':
      return { code: 'conflict', detail: `port ${r.port} is in use by a tunnel on another node; ask for another port` };
    case 'no-client':
      return { code: 'not-found', detail: `tunnel "${id}" has no live connection of this client to join` };
    case 'limit':
      return { code: 'forbidden', detail: `limit reached: at most ${r.max} live tunnels per user (max-tunnels-per-user); you hold ${r.held}: close one first` };
    case 'tcp-ports':
      return { code: 'forbidden', detail: `limit reached: at most ${r.max} TCP ports per user (max-tcp-ports-per-user); you hold or are opening ${r.held}: close a TCP tunnel first` };
    case 'rate':
      // Transient: the wire's refusal codes have no rate-limited, so the words start with it.
      return { code: 'unavailable', detail: `rate-limited: at most ${r.max} tunnel registrations per user per minute (max-registrations-per-minute); try again in ${r.retryAfterS} s`, retryAfterS: r.retryAfterS };
  }
}

/**
 * What the client that lost its tunnel to a takeover is told. Another key of the same user is
 * named (name and public prefix) and never called "your key": the person reading may not be the
 * one who started the other client.
 */
export function takeoverReason(sameKey: boolean, newKey: { name: string; key_prefix: string } | null): string {
  if (sameKey) return 'taken over by another connection using this same key';
  if (newKey) return `taken over by another connection of the same user, with the key "${newKey.name}" (${newKey.key_prefix})`;
  return 'taken over by another connection of the same user, with another key';
}
