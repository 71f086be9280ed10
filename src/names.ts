// Names people read and compare: emails and team names. Two that look the same must be the same
// (or refused), so every such name is stored in NFKC form (fullwidth "ａ" is "a", "ﬁ" is "fi"),
// compared by a key that also folds case, and refused when it hides characters (zero-width,
// bidi controls, other invisible ones) or mixes Latin with Cyrillic or Greek letters in one
// word (a Cyrillic "а" in "pаypal"). The key is computed here, in JS, and stored beside the name
// (users.email_key, teams.name_key, migration 006): the database compares keys and never folds
// case itself, so SQL and JS cannot disagree (PostgreSQL's lower() depends on the locale).

/** Invisible or direction-changing: controls, format characters, default-ignorable code points. */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Bidi_Control}\u2028\u2029]/u;
const SCRIPTS: [string, RegExp][] = [
  ['Latin', /\p{Script=Latin}/u],
  ['Cyrillic', /\p{Script=Cyrillic}/u],
  ['Greek', /\p{Script=Greek}/u],
];

/** The form a name is stored in. */
export function canonicalName(s: string): string {
  return s.normalize('NFKC').trim();
}

/** The comparison key: NFKC, then case folded (upper then lower also folds "ß" with "ss"). */
export function nameKey(s: string): string {
  return s.normalize('NFKC').trim().toUpperCase().toLowerCase().normalize('NFKC');
}

/** Why `s` (already canonical) cannot be a name, or null. `what` names it in the message. */
export function nameProblem(s: string, what: string): string | null {
  const hidden = HIDDEN.exec(s);
  if (hidden) {
    const cp = hidden[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
    return `${what} contains an invisible or text-direction character (U+${cp}), which would let two different names look the same`;
  }
  for (const word of s.split(/[\s@.\-_+]+/u)) {
    const found = SCRIPTS.filter(([, re]) => re.test(word)).map(([name]) => name);
    if (found.length > 1) return `${what} mixes ${found.join(' and ')} letters in "${word}", which can pose as another name`;
  }
  return null;
}
