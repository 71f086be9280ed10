/** uvu has no per-test timeout: every network wait gets its own. */
export function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms);
    }),
  ]);
}

/** Polls `check` until it returns a truthy value or the deadline passes. */
export async function eventually<T>(check: () => Promise<T> | T, ms: number, what: string): Promise<T> {
  const until = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > until) throw new Error(`${what}: not true within ${ms} ms${last ? ` (last error: ${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
