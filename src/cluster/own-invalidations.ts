// Keys and users this node's own API has just invalidated (a key revoked, a user deactivated or
// changed). The change's trigger notifies every node, this one too: when that notification
// arrives, the invalidation has run here already and is not run a second time.
//
// Skipping is the only risk here, never running twice, so a mark is narrow: one per key or user
// and kind (a role change's mark never skips a deactivation), used by the first notification
// that matches, kept at most WINDOW_MS, and not set when a notification of the same kind just ran
// (it came before the API's own message: the next one would be another change). The reconcile
// (every few seconds, and after the LISTEN connection came back) forgets every mark.

const WINDOW_MS = 3_000;
/** Past this many, the oldest are forgotten (a forgotten mark only makes an invalidation run twice). */
const MAX_REMEMBERED = 10_000;

type Kind = 'key' | 'user-end' | 'user-cache';

export class OwnInvalidations {
  private readonly marks = new Map<string, number>();
  private readonly ran = new Map<string, number>();

  /** This node's API invalidated these (`end`: their connections ended too). */
  mark(keyIds: readonly string[], userIds: readonly string[], end: boolean, now = performance.now()): void {
    // A key's notification always ends its connections: only an invalidation that did is marked.
    const kinds: [Kind, readonly string[]][] = [['key', end ? keyIds : []], [end ? 'user-end' : 'user-cache', userIds]];
    for (const [kind, ids] of kinds) {
      for (const id of ids) {
        const k = `${kind}:${id}`;
        if ((this.ran.get(k) ?? -Infinity) > now - WINDOW_MS) continue;
        remember(this.marks, k, now + WINDOW_MS, now);
      }
    }
  }

  /** The ids of a notification still to invalidate here: those this node's API did not just do. */
  take(kind: Kind, ids: readonly string[], now = performance.now()): string[] {
    return ids.filter((id) => {
      const k = `${kind}:${id}`;
      const until = this.marks.get(k);
      this.marks.delete(k);
      if (until !== undefined && until > now) return false;
      remember(this.ran, k, now, now - WINDOW_MS);
      return true;
    });
  }

  forget(): void {
    this.marks.clear();
    this.ran.clear();
  }
}

/** Sets `k` (as the newest) and drops the oldest entries past the bound or older than `stale`. */
function remember(m: Map<string, number>, k: string, v: number, stale: number): void {
  m.delete(k);
  m.set(k, v);
  for (const [old, t] of m) {
    if (m.size <= MAX_REMEMBERED && t > stale) break;
    m.delete(old);
  }
}
