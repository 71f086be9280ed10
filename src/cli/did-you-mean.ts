// "did you mean `addr`?" for a misspelt key in burrow.yml: the closest allowed key by edit
// distance (a swap of two neighbouring letters counts as one edit), when it is close enough to
// be the likely intent. Far-off keys get no guess: a wrong suggestion misleads more than none.

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The allowed word closest to `word`, or null when none is near (at most a third of it wrong). */
export function closestWord(word: string, allowed: readonly string[]): string | null {
  const lower = word.toLowerCase();
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of allowed) {
    // Case and -/_ slips ("remote-port", "Addr") are the commonest; they count as no edit.
    const normalised = lower.replace(/-/g, '_');
    const distance = normalised === candidate ? 0 : editDistance(normalised, candidate);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  const limit = Math.max(1, Math.floor(Math.max(word.length, 3) / 3));
  return best !== null && bestDistance <= limit ? best : null;
}

/** "unknown key (did you mean `addr`?; allowed: …)" — the suggestion first, where the eye lands. */
export function unknownKeyMessage(key: string, allowed: readonly string[]): string {
  const guess = closestWord(key, allowed);
  return `unknown key (${guess ? `did you mean \`${guess}\`? ` : ''}allowed: ${allowed.join(', ')})`;
}
