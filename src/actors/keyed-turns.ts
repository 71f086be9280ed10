// Work on one key runs one piece after another (each reads, awaits, then writes); work on
// different keys runs side by side. A failed piece does not stop the next.

export class KeyedTurns {
  private readonly tails = new Map<string, Promise<unknown>>();

  async run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const before = this.tails.get(key) ?? Promise.resolve();
    const mine = before.then(work, work);
    const settled = mine.catch(() => undefined);
    this.tails.set(key, settled);
    try {
      return await mine;
    } finally {
      if (this.tails.get(key) === settled) this.tails.delete(key);
    }
  }
}
