import { readFileSync } from 'node:fs';

/** burrow's version, from package.json (dist/src/version.js → the package root). */
export function burrowVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
